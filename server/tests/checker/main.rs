//! The system checker: the whole service under a concurrent workload with faults, its history
//! checked afterwards. Isolation by a list-append workload (`lists.rs`) checked the way Jepsen's
//! Elle does (`elle.rs`): no G0, G1a, G1c, G-single or G2 cycle, as writes are serializable and
//! each `GetEntities` reads one snapshot. Feed completeness (`feed.rs`): followers resuming from
//! their saved cursor after every batch see every committed change exactly once, in commit order,
//! and nothing of a write that did not commit. At the end, the lists as a whole through an
//! aggregate's count, scan segments and a sorted query paged and streamed (`lists::check_whole_table_reads`).
//! Faults: SIGKILL of the server (embedded store); SIGKILL of one of two servers and an
//! immediate stop of PostgreSQL (PostgreSQL store).
//!
//! A run lasts [`SECONDS`] seconds of workload; `TRESTLE_CHECK_SECONDS=600` runs longer, by
//! hand (docs/semantics.md).

#[path = "../../../tests/common/postgres.rs"]
mod postgres_cluster;
#[path = "../../../tests/common/rng.rs"]
mod rng;
#[path = "../support/mod.rs"]
mod support;

mod elle;
mod feed;
mod lists;
mod servers;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use servers::{Servers, System};
use trestle_proto::pb;

/// Seconds of workload in a run, unless `TRESTLE_CHECK_SECONDS` says.
const SECONDS: u64 = 20;
const LIST_CLIENTS: u64 = 6;
const EVENT_WRITERS: u64 = 6;
/// A fault every this often.
const FAULT_EVERY: Duration = Duration::from_millis(2_500);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_embedded_store_keeps_its_promises_through_sigkill() {
    let system = tokio::task::block_in_place(System::sled);
    check_system(system).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_postgres_store_keeps_its_promises_through_server_and_database_crashes() {
    let Some(system) = tokio::task::block_in_place(System::postgres) else {
        return;
    };
    check_system(system).await;
}

fn seconds() -> u64 {
    std::env::var("TRESTLE_CHECK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SECONDS)
}

/// Creates the workload's tables, through whichever server answers first.
async fn create_tables(servers: &Servers) {
    let mut tables: Vec<pb::CreateTableRequest> = lists::TABLES
        .iter()
        .map(|table| pb::CreateTableRequest {
            table: (*table).into(),
            change_feed: true,
            ..Default::default()
        })
        .collect();
    tables.push(pb::CreateTableRequest {
        table: feed::EVENTS.into(),
        change_feed: true,
        time_to_live: true,
        ..Default::default()
    });
    let mut client = servers.each().remove(0);
    for request in tables {
        client.create_table(request).await.expect("create a table");
    }
}

/// Runs the workload with faults on `system`, then checks what it saw.
async fn check_system(system: System) {
    create_tables(&system.servers).await;
    let stop = Instant::now() + Duration::from_secs(seconds());
    let lists: Vec<_> = (0..LIST_CLIENTS)
        .map(|n| {
            tokio::spawn(lists::run_client(
                n + 1,
                system.servers.clone(),
                stop,
                17 + n,
            ))
        })
        .collect();
    let writers: Vec<_> = (0..EVENT_WRITERS)
        .map(|n| tokio::spawn(feed::run_writer(n, system.servers.clone(), stop, 91 + n)))
        .collect();
    let followed: Vec<_> = [lists::TABLES[0], lists::TABLES[1], feed::EVENTS]
        .into_iter()
        .map(|table| {
            let servers = system.servers.clone();
            tokio::spawn(async move { (table, feed::follow(table, servers, stop).await) })
        })
        .collect();
    let system = std::sync::Arc::new(system);
    let faults = {
        let system = system.clone();
        tokio::task::spawn_blocking(move || do_faults(&system, stop))
    };
    let mut history = Vec::new();
    for client in lists {
        history.extend(client.await.unwrap());
    }
    let mut writes = Vec::new();
    for writer in writers {
        writes.extend(writer.await.unwrap());
    }
    let followers: Vec<_> = futures_join(followed).await;
    let faults = faults.await.unwrap();
    let servers = &system.servers;

    let finals = lists::final_lists(servers).await;
    let anomalies = elle::check(&history, &finals);
    let count = |outcome| {
        history
            .iter()
            .filter(|t| t.outcome == outcome && !t.appends.is_empty())
            .count()
    };
    eprintln!(
        "checker: {} transactions ({} writes committed, {} refused, {} in doubt), {} event \
         writes, {faults} faults",
        history.len(),
        count(elle::Outcome::Committed),
        count(elle::Outcome::Failed),
        count(elle::Outcome::Unknown),
        writes.len(),
    );
    assert!(anomalies.is_empty(), "anomalies: {anomalies:#?}");
    lists::check_whole_table_reads(servers, &finals).await;
    assert!(
        count(elle::Outcome::Committed) > 100,
        "too few transactions committed to check anything"
    );

    wait_for_expiry(servers).await;
    for (table, (mut records, cursor)) in followers {
        records.extend(feed::read_to_end(servers, table, &cursor).await);
        let from_start = feed::read_to_end(servers, table, "").await;
        feed::check_follower(table, &records, &from_start);
        feed::check_filtered(servers, table, &from_start).await;
        feed::check_segments(servers, table, &from_start).await;
        if table == feed::EVENTS {
            let stored = stored_events(servers).await;
            feed::check_events_feed(&from_start, &writes, &stored);
        } else {
            feed::check_list_feed(table, &from_start, &finals);
        }
        eprintln!("checker: {table}'s feed: {} records", from_start.len());
    }
    assert!(feed::expiring(&writes) > 0, "no entity with a time to live");
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut done = Vec::new();
    for handle in handles {
        done.push(handle.await.unwrap());
    }
    done
}

/// Faults until `stop`, one every [`FAULT_EVERY`]: SIGKILL of each server in turn, and every
/// third one an immediate stop of the database instead, where there is one. How many.
fn do_faults(system: &System, stop: Instant) -> usize {
    let mut faults = 0;
    loop {
        std::thread::sleep(FAULT_EVERY);
        if Instant::now() + Duration::from_secs(1) >= stop {
            return faults;
        }
        faults += 1;
        if faults % 3 == 0 && system.crash_database(Duration::from_millis(700)) {
            continue;
        }
        system.kill_and_restart(faults % system.server_count(), Duration::from_millis(200));
    }
}

/// Waits until the server has removed every entity whose time to live ran out: each insert of
/// one in the feed followed by its expiry.
async fn wait_for_expiry(servers: &Servers) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let feed = feed::read_to_end(servers, feed::EVENTS, "").await;
        let mut open: BTreeMap<&(String, String), bool> = BTreeMap::new();
        for record in feed.iter().filter(|r| r.key.1.starts_with('t')) {
            open.insert(&record.key, record.kind != pb::ChangeKind::Expire);
        }
        let waiting = open.values().filter(|open| **open).count();
        if waiting == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} entities never expired"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The events table as stored: by key, each entity's ETag and `N`.
async fn stored_events(servers: &Servers) -> BTreeMap<(String, String), (String, i64)> {
    let mut client = servers.each().remove(0);
    let stored = support::all_entities(&mut client, feed::EVENTS).await;
    stored
        .into_iter()
        .map(|(key, entity)| {
            let n = match entity.properties.get("N").and_then(|v| v.kind.as_ref()) {
                Some(pb::value::Kind::Int64Value(n)) => *n,
                other => panic!("N is {other:?}"),
            };
            (key, (entity.etag, n))
        })
        .collect()
}
