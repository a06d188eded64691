//! The HTTP probes (`--health-listen`) of the built binary: `/healthz` while the process serves,
//! `/readyz` while the store answers, through a PostgreSQL stop and start (false while it is down,
//! true again after, `/healthz` true throughout).

#[path = "../../tests/common/postgres.rs"]
mod postgres_cluster;
mod support;

use std::time::{Duration, Instant};

use support::{free_port, http, ServerProcess};

/// The status line's code of `GET <path>` on `addr`.
async fn probe(addr: &str, path: &str) -> u16 {
    let request = format!("GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n");
    let answer = http(addr, &request).await;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

/// Probes `path` until it answers `status`, for at most `within`.
async fn until(addr: &str, path: &str, status: u16, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if probe(addr, path).await == status {
            return;
        }
        assert!(Instant::now() < deadline, "{path} never answered {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_follow_the_store_through_a_postgres_outage() {
    let dir = tempfile::tempdir().unwrap();
    let health = free_port();
    let embedded = ServerProcess::start_with(dir.path(), &["--health-listen", &health]);
    assert_eq!(probe(&health, "/healthz").await, 200);
    assert_eq!(probe(&health, "/readyz").await, 200);
    assert_eq!(probe(&health, "/elsewhere").await, 404);
    embedded.kill_9();

    let Some(cluster) = tokio::task::block_in_place(postgres_cluster::Postgres::start) else {
        return;
    };
    let url = tokio::task::block_in_place(|| cluster.database("probed"));
    let health = free_port();
    let data = dir.path().join("unused");
    let _server = ServerProcess::start_with(&data, &["--store", &url, "--health-listen", &health]);
    assert_eq!(probe(&health, "/readyz").await, 200);
    tokio::task::block_in_place(|| cluster.kill());
    until(&health, "/readyz", 503, Duration::from_secs(15)).await;
    assert_eq!(
        probe(&health, "/healthz").await,
        200,
        "alive while the store is down"
    );
    tokio::task::block_in_place(|| cluster.restart());
    until(&health, "/readyz", 200, Duration::from_secs(30)).await;
}
