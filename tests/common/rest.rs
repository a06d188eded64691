//! Raw HTTP to the REST endpoint, for what the Azure SDKs never send: a server with the endpoint
//! on a loopback port, one request and its answer on a kept-alive socket, and whether the server
//! closes a socket.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::TestServer;

/// A server with the REST endpoint, configured by `configure`; its REST address.
pub async fn server(
    configure: impl FnOnce(&mut trestle_server::Config) + Send + 'static,
) -> (TestServer, std::net::SocketAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rest = listener.local_addr().unwrap();
    let server = TestServer::start_with_rest(listener, configure).await;
    (server, rest)
}

/// Sends one request on `socket` (kept alive) and reads its answer: the status, the head and
/// the body.
pub async fn exchange(
    socket: &mut TcpStream,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, String) {
    exchange_with(socket, method, path, "", body).await
}

/// [`exchange`] with `headers` (each line ending in CRLF) before the request's own, so that they
/// win where they name the same header (a server reads the first).
pub async fn exchange_with(
    socket: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> (u16, String) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\n{headers}Host: localhost\r\nx-ms-version: 2019-02-02\r\n\
         Accept: application/json;odata=nometadata\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body).await.unwrap();
    read_answer(socket).await
}

/// Reads one answer from `socket`: the status and the whole text (head and body).
pub async fn read_answer(socket: &mut TcpStream) -> (u16, String) {
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let read = socket.read(&mut buf).await.unwrap();
        assert!(read > 0, "the server closed the connection mid-answer");
        received.extend_from_slice(&buf[..read]);
        let text = String::from_utf8_lossy(&received).into_owned();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length = text[..end]
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        if received.len() >= end + 4 + length {
            let status = text[9..12].parse().unwrap();
            return (status, text);
        }
    }
}

/// Whether the server closes `socket` within `within` (reading whatever it answers first).
pub async fn closed_within(socket: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 8192];
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

/// Asserts that `answer` (a status and the whole response, as [`exchange`] gives them) refuses
/// with `status` and Azure's error code `code`.
#[track_caller]
pub fn assert_refused(answer: &(u16, String), status: u16, code: &str) {
    let (answered, text) = answer;
    assert_eq!(*answered, status, "{text}");
    let header = format!("x-ms-error-code: {code}\r\n");
    assert!(text.contains(&header), "{code} expected: {text}");
}
