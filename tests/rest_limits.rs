//! What no client of the REST endpoint can make the server hold, over raw TCP: connections past
//! the cap are closed at once, idle ones after the idle timeout, an oversized body is refused
//! with Azure's reason, and shutdown closes the connections still open.

mod common;

use std::time::{Duration, Instant};

use common::rest::{assert_refused, closed_within, exchange, server};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_at_once_and_idle_ones_after_the_timeout() {
    let (_server, rest) = server(|config| {
        config.limits.max_connections = 3;
        config.limits.idle_timeout = Duration::from_millis(1_500);
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut socket = TcpStream::connect(rest).await.unwrap();
        let (status, _) = exchange(&mut socket, "GET", "/devstoreaccount1/Tables", b"").await;
        assert_eq!(status, 200);
        held.push(socket);
    }
    let mut over = TcpStream::connect(rest).await.unwrap();
    assert!(closed_within(&mut over, Duration::from_millis(500)).await);

    // Kept alive but silent: closed once idle, and then new clients are served again.
    let started = Instant::now();
    for socket in &mut held {
        assert!(closed_within(socket, Duration::from_secs(4)).await);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "closed before idle"
    );
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let (status, _) = exchange(&mut socket, "GET", "/devstoreaccount1/Tables", b"").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_message_limit_is_refused_with_azures_reason() {
    let (_server, rest) = server(|config| config.limits.max_message_bytes = 64 * 1024).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let (status, _) = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Tables",
        br#"{"TableName":"Sized"}"#,
    )
    .await;
    assert_eq!(status, 201);
    let big = format!(
        r#"{{"PartitionKey":"p","RowKey":"r","Text":"{}"}}"#,
        "x".repeat(100 * 1024)
    );
    let answer = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Sized",
        big.as_bytes(),
    )
    .await;
    assert_refused(&answer, 413, "RequestBodyTooLarge");
}

/// A client that writes its whole body before it reads (as the JS SDK does) reads the 413 for a
/// body over Azure's 4 MiB, rather than a broken connection: the server reads and drops what
/// arrives of it (within a bound) before it answers and closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_an_oversized_body_whole_reads_the_413() {
    use tokio::io::AsyncWriteExt;
    let (_server, rest) = server(|_| {}).await;
    for announced in [true, false] {
        let mut socket = TcpStream::connect(rest).await.unwrap();
        let body = vec![b'x'; 4 * 1024 * 1024 + 1];
        let length = match announced {
            true => format!("Content-Length: {}\r\n", body.len()),
            false => "Transfer-Encoding: chunked\r\n".to_owned(),
        };
        let head = format!(
            "POST /devstoreaccount1/Tables HTTP/1.1\r\nHost: localhost\r\n\
             Content-Type: application/json\r\n{length}\r\n"
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        match announced {
            true => socket.write_all(&body).await.unwrap(),
            false => {
                for chunk in body.chunks(256 * 1024) {
                    let size = format!("{:x}\r\n", chunk.len());
                    socket.write_all(size.as_bytes()).await.unwrap();
                    socket.write_all(chunk).await.unwrap();
                    socket.write_all(b"\r\n").await.unwrap();
                }
                socket.write_all(b"0\r\n\r\n").await.unwrap();
            }
        }
        let answer = common::rest::read_answer(&mut socket).await;
        assert_refused(&answer, 413, "RequestBodyTooLarge");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_rest_connections_still_open() {
    let data_dir = tempfile::tempdir().unwrap();
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rest = listener.local_addr().unwrap();
    let mut config = trestle_server::Config::new(data_dir.path());
    config.shutdown_grace = Duration::from_millis(200);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listeners = trestle_server::Listeners {
        grpc,
        rest: Some(listener),
    };
    let serving = tokio::spawn(trestle_server::serve(listeners, config, async {
        let _ = stopped.await;
    }));
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let (status, _) = exchange(&mut socket, "GET", "/devstoreaccount1/Tables", b"").await;
    assert_eq!(status, 200);

    stop.send(()).unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("serve returns although a REST connection is open");
    served.unwrap().unwrap();
    assert!(closed_within(&mut socket, Duration::from_secs(1)).await);
    // The store was released: it opens again.
    trestle_server::Engine::open(&trestle_server::storage::StoreConfig::embedded(
        data_dir.path(),
    ))
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_in_flight_limit_are_turned_away_as_busy() {
    // No permit at all: every request is one too many, on either protocol.
    let (server, rest) = server(|config| config.limits.max_in_flight = 0).await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let answer = exchange(&mut socket, "GET", "/devstoreaccount1/Tables", b"").await;
    assert_refused(&answer, 503, "ServerBusy");
    let refused = server
        .client()
        .await
        .list_tables(trestle_proto::pb::ListTablesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
}
