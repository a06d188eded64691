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
    // `trestle-server probe`, a container's HEALTHCHECK: exit 0 on 200 only.
    let probe_tool = |path: &str| {
        let url = format!("http://{health}{path}");
        tokio::task::block_in_place(|| support::run_tool(&["probe", &url]))
    };
    let (ready, _, _) = probe_tool("/readyz");
    assert!(ready.success());
    let (elsewhere, _, said) = probe_tool("/elsewhere");
    assert!(!elsewhere.success());
    assert!(said.contains("404"), "{said}");
    embedded.kill_9();
    let (gone, _, said) = probe_tool("/readyz");
    assert!(!gone.success(), "a server that is gone is not healthy");
    assert!(said.contains("trestle-server:"), "{said}");
    let (bad, _, said) = tokio::task::block_in_place(|| support::run_tool(&["probe", "ftp://x/"]));
    assert!(!bad.success());
    assert!(said.contains("http://host:port/path"), "{said}");

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
    let url = format!("http://{health}/readyz");
    let (down, _, said) = tokio::task::block_in_place(|| support::run_tool(&["probe", &url]));
    assert!(!down.success(), "not ready while the store is down");
    assert!(said.contains("503"), "{said}");
    assert_eq!(
        probe(&health, "/healthz").await,
        200,
        "alive while the store is down"
    );
    tokio::task::block_in_place(|| cluster.restart());
    until(&health, "/readyz", 200, Duration::from_secs(30)).await;
}

/// Whether the server closes `socket` within `within`.
async fn closed_within(socket: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    let closed = async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(within, closed).await.is_ok()
}

/// The probes' listener is bounded as the others are: 64 connections at once (one more is closed
/// on arrival), each closed after 10 s without a request (a half-sent one included), after which
/// the probes answer again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_listener_caps_its_connections_and_closes_idle_ones() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let health = free_port();
    let _server = ServerProcess::start_with(dir.path(), &["--health-listen", &health]);
    assert_eq!(probe(&health, "/healthz").await, 200);
    let mut held = Vec::new();
    for n in 0..64 {
        let mut socket = tokio::net::TcpStream::connect(&health).await.unwrap();
        if n % 2 == 0 {
            socket
                .write_all(b"GET /healthz HTTP/1.1\r\nHo")
                .await
                .unwrap();
        }
        held.push(socket);
    }
    // Every connection is accepted (and counted) before the next probe's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut over = tokio::net::TcpStream::connect(&health).await.unwrap();
    let _ = over
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: p\r\n\r\n")
        .await;
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "over the cap, yet served"
    );
    let started = Instant::now();
    for socket in &mut held {
        assert!(
            closed_within(socket, Duration::from_secs(15)).await,
            "kept past the idle timeout"
        );
    }
    assert!(
        started.elapsed() >= Duration::from_secs(8),
        "closed before the idle timeout"
    );
    assert_eq!(probe(&health, "/healthz").await, 200);
}
