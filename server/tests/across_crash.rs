//! Transactions across partitions and tables through SIGKILL: 16 clients move money between
//! accounts of two tables (each transfer also writing its record in a third) while the server
//! is killed; after the restart every acknowledged transfer is recorded, every balance is its
//! opening balance plus the recorded transfers (no transfer applied in part), and the bank's
//! total is whole. On PostgreSQL: one of two servers killed mid-load, the other serving on.

#[path = "../../tests/common/bank.rs"]
mod bank;
#[path = "../../tests/common/postgres.rs"]
mod postgres_cluster;
mod support;

use std::time::{Duration, Instant};

use support::ServerProcess;

/// Runs transfers from `clients` clients on the servers `endpoints` (client n on endpoint
/// n mod len) until `stop`, killing `victim` after `kill_after`: the acknowledged transfers.
async fn transfers_with_a_kill(
    endpoints: Vec<String>,
    clients: usize,
    stop: Instant,
    victim: ServerProcess,
    kill_after: Duration,
) -> Vec<bank::Transfer> {
    let tasks: Vec<_> = (0..clients)
        .map(|n| {
            let endpoint = endpoints[n % endpoints.len()].clone();
            tokio::spawn(bank::transfer_until(
                endpoint,
                n,
                stop,
                bank::Unavailable::Stop,
            ))
        })
        .collect();
    tokio::time::sleep(kill_after).await;
    victim.kill_9();
    let mut acknowledged = Vec::new();
    for task in tasks {
        let (done, _failure) = task.await.unwrap();
        acknowledged.extend(done);
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_keeps_every_acknowledged_transfer_and_no_half_of_any() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let endpoint = format!("http://{}", server.addr);
    bank::open(&mut bank::connect(&endpoint).await).await;
    let stop = Instant::now() + Duration::from_secs(10);
    let acknowledged =
        transfers_with_a_kill(vec![endpoint], 16, stop, server, Duration::from_secs(2)).await;
    assert!(acknowledged.len() > 20, "{} transfers", acknowledged.len());

    let restarted = ServerProcess::start(dir.path());
    let mut client = bank::connect(&format!("http://{}", restarted.addr)).await;
    bank::check(&mut client, &acknowledged).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_one_of_two_servers_killed_loses_no_transfer() {
    // (The cluster's programs and its admin connection block: off the runtime's turn.)
    let Some((_cluster, url)) = tokio::task::block_in_place(|| {
        let cluster = postgres_cluster::Postgres::start()?;
        let url = cluster.database("bank");
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
    let endpoints = vec![
        format!("http://{}", victim.addr),
        format!("http://{}", survivor.addr),
    ];
    bank::open(&mut bank::connect(&endpoints[1]).await).await;
    let stop = Instant::now() + Duration::from_secs(6);
    let acknowledged =
        transfers_with_a_kill(endpoints.clone(), 16, stop, victim, Duration::from_secs(2)).await;
    assert!(acknowledged.len() > 20, "{} transfers", acknowledged.len());
    let mut client = bank::connect(&endpoints[1]).await;
    bank::check(&mut client, &acknowledged).await;
}
