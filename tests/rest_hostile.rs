//! The REST endpoint against hostile clients, over raw HTTP (what the Azure SDKs never send):
//! bodies read only after authentication and within a shared buffer and a timeout, SharedKey
//! signatures bound to their date, parsing that stays linear and off the runtime, capped error
//! messages, and the exact rules (DateTime range, duplicate keys, one well-formed changeset).

mod common;

use std::time::{Duration, Instant, SystemTime};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use common::rest::{closed_within, exchange, exchange_with, read_answer, server};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use trestle_proto::pb;

const MIB: usize = 1024 * 1024;

/// The resident memory of this process (the server runs in it), in bytes.
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

async fn create_table(rest: std::net::SocketAddr, name: &str) {
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let body = format!(r#"{{"TableName":"{name}"}}"#);
    let (status, answer) = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Tables",
        body.as_bytes(),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
}

/// Whether `answer` carries Azure's error code `code`.
fn has_code(answer: &str, code: &str) -> bool {
    answer.contains(&format!("x-ms-error-code: {code}\r\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withheld_bodies_stay_within_the_buffer_and_are_closed_by_the_body_timeout() {
    let (server, rest) = server(|config| {
        config.limits.max_message_bytes = 4 * MIB;
        config.limits.rest_body_buffer_bytes = 32 * MIB;
        config.limits.body_timeout = Duration::from_secs(2);
        config.limits.idle_timeout = Duration::from_secs(120);
    })
    .await;
    create_table(rest, "Held").await;
    let before = rss();

    // 60 clients each send all but the last byte of a 4 MiB body, then stop.
    let chunk = vec![b'x'; 4 * MIB - 1];
    let mut held = Vec::new();
    for _ in 0..60 {
        let mut socket = TcpStream::connect(rest).await.unwrap();
        let head = format!(
            "POST /devstoreaccount1/Held HTTP/1.1\r\nHost: localhost\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            4 * MIB
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        // Past the buffer the server answers and closes: the rest of the write may fail.
        let _ = socket.write_all(&chunk).await;
        held.push(socket);
    }
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 32 * MIB + 64 * MIB,
        "60 withheld 4 MiB bodies grew the process by {} MiB",
        grown / MIB
    );

    // Others are served meanwhile, on both protocols.
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let (status, _) = exchange(&mut socket, "GET", "/devstoreaccount1/Tables", b"").await;
    assert_eq!(status, 200);
    server
        .client()
        .await
        .list_tables(pb::ListTablesRequest::default())
        .await
        .unwrap();

    // Every withheld body's connection is closed by the body timeout, far before the idle one.
    let started = Instant::now();
    for socket in &mut held {
        assert!(closed_within(socket, Duration::from_secs(10)).await);
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_server_refuses_an_unauthenticated_request_before_reading_its_body() {
    let (_server, rest) = server(|config| {
        let keys = trestle_proto::access::KeyRing::generate().unwrap();
        config.authenticator = trestle_server::auth::Authenticator::with_keys(keys);
    })
    .await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let head = format!(
        "POST /devstoreaccount1/Tables HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        16 * MIB
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    // No byte of the body sent: the answer comes anyway.
    let (status, answer) = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut socket))
        .await
        .expect("the refusal does not wait for the body");
    assert_eq!(status, 403, "{answer}");
}

/// A SharedKey or SharedKeyLite `Authorization` header for a request signed at `date` with the
/// development key.
fn shared_key(scheme: &str, method: &str, path: &str, date: &str) -> String {
    let key = STANDARD
        .decode("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
        .unwrap();
    let resource = format!("/devstoreaccount1/devstoreaccount1{path}");
    let to_sign = match scheme {
        "SharedKey" => format!("{method}\n\napplication/json\n{date}\n{resource}"),
        _ => format!("{date}\n{resource}"),
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let signature = STANDARD.encode(ring::hmac::sign(&key, to_sign.as_bytes()));
    format!("Authorization: {scheme} devstoreaccount1:{signature}\r\nx-ms-date: {date}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_key_signatures_are_refused_outside_their_date_window() {
    let (_server, rest) = server(|_| {}).await;
    create_table(rest, "Signed").await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let entity = br#"{"PartitionKey":"p","RowKey":"r","V":1}"#;
    let now = httpdate::fmt_http_date(SystemTime::now());
    let stale = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(20 * 60));
    let ahead = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(20 * 60));
    let path = "/devstoreaccount1/Signed";

    // Signed now: served.
    let headers = shared_key("SharedKey", "POST", "/Signed", &now);
    let (status, answer) = exchange_with(&mut socket, "POST", path, &headers, entity).await;
    assert_eq!(status, 201, "{answer}");

    // Stale, ahead, missing or unparsable dates: refused, with either scheme.
    for (scheme, date) in [
        ("SharedKey", stale.as_str()),
        ("SharedKey", ahead.as_str()),
        ("SharedKeyLite", stale.as_str()),
    ] {
        let headers = shared_key(scheme, "GET", "/Tables", date);
        let (status, answer) = exchange_with(
            &mut socket,
            "GET",
            "/devstoreaccount1/Tables",
            &headers,
            b"",
        )
        .await;
        assert_eq!(status, 403, "{scheme} at {date}: {answer}");
        assert!(has_code(&answer, "AuthenticationFailed"), "{answer}");
    }
    let undated = shared_key("SharedKey", "GET", "/Tables", "").replace("x-ms-date: \r\n", "");
    let (status, answer) = exchange_with(
        &mut socket,
        "GET",
        "/devstoreaccount1/Tables",
        &undated,
        b"",
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("must carry its date"), "{answer}");
    let nonsense = shared_key("SharedKey", "GET", "/Tables", "some day");
    let (status, answer) = exchange_with(
        &mut socket,
        "GET",
        "/devstoreaccount1/Tables",
        &nonsense,
        b"",
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("not an HTTP date"), "{answer}");

    // A SharedKeyLite GET captured long ago, replayed as a DELETE: refused, nothing deleted.
    let entity_path = "/Signed(PartitionKey='p',RowKey='r')";
    let captured = shared_key("SharedKeyLite", "GET", entity_path, &stale);
    let (status, answer) = exchange_with(
        &mut socket,
        "DELETE",
        &format!("/devstoreaccount1{entity_path}"),
        &format!("{captured}If-Match: *\r\n"),
        b"",
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    let fresh = shared_key("SharedKeyLite", "GET", entity_path, &now);
    let (status, answer) = exchange_with(
        &mut socket,
        "GET",
        &format!("/devstoreaccount1{entity_path}"),
        &fresh,
        b"",
    )
    .await;
    assert_eq!(status, 200, "the entity is still there: {answer}");
}

/// A JSON object of `members` members, each `"Pn":n`, with the keys first.
fn wide_entity(members: usize) -> Vec<u8> {
    let mut body = String::from(r#"{"PartitionKey":"p","RowKey":"wide""#);
    for n in 0..members {
        body.push_str(&format!(",\"P{n}\":{n}"));
    }
    body.push('}');
    body.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_100k_members_is_refused_at_once_and_other_clients_keep_their_latency() {
    let (server, rest) = server(|_| {}).await;
    create_table(rest, "Wide").await;
    let body = wide_entity(100_000);
    assert!(body.len() > MIB, "{}", body.len());
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let started = Instant::now();
    let (status, answer) = exchange(&mut socket, "POST", "/devstoreaccount1/Wide", &body).await;
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status, 400, "{answer}");
    assert!(has_code(&answer, "TooManyProperties"), "{answer}");

    // Another client's point reads, alone and then while four such bodies arrive over and over.
    let mut client = server.client().await;
    let mut sdk_entity = pb::Entity {
        partition_key: "p".into(),
        row_key: "r".into(),
        ..Default::default()
    };
    sdk_entity.properties.insert("V".into(), common::int32(1));
    client
        .insert_entity(common::insert_request("Wide", sdk_entity))
        .await
        .unwrap();
    let p99 = |client: &mut common::RawClient| {
        let mut client = client.clone();
        async move {
            let mut times = Vec::new();
            for _ in 0..200 {
                let started = Instant::now();
                client
                    .get_entity(common::get_request("Wide", "p", "r"))
                    .await
                    .unwrap();
                times.push(started.elapsed());
            }
            times.sort();
            times[times.len() * 99 / 100]
        }
    };
    let alone = p99(&mut client).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attackers: Vec<_> = (0..4)
        .map(|_| {
            let (body, stop) = (body.clone(), stop.clone());
            tokio::spawn(async move {
                let mut socket = TcpStream::connect(rest).await.unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (status, _) =
                        exchange(&mut socket, "POST", "/devstoreaccount1/Wide", &body).await;
                    assert_eq!(status, 400);
                }
            })
        })
        .collect();
    let attacked = p99(&mut client).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for attacker in attackers {
        attacker.await.unwrap();
    }
    assert!(
        attacked < alone * 10 + Duration::from_millis(100),
        "point reads' p99 went from {alone:?} alone to {attacked:?} under four 100k-member bodies"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_messages_are_capped_whatever_the_input() {
    let (_server, rest) = server(|_| {}).await;
    create_table(rest, "Capped").await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let huge = "g".repeat(3 * MIB);
    let bodies = [
        format!(r#"{{"PartitionKey":"p","RowKey":"r","G@odata.type":"Edm.Guid","G":"{huge}"}}"#),
        format!(r#"{{"PartitionKey":"p","RowKey":"r","G@odata.type":"{huge}","G":"x"}}"#),
    ];
    for body in bodies {
        let (status, answer) = exchange(
            &mut socket,
            "POST",
            "/devstoreaccount1/Capped",
            body.as_bytes(),
        )
        .await;
        assert_eq!(status, 400);
        assert!(answer.len() < 2048, "an answer of {} bytes", answer.len());
    }
    // A $batch part whose URL is 3 MB long.
    let url = format!(
        "http://localhost/devstoreaccount1/Capped{}",
        "x".repeat(3 * MIB)
    );
    let body = batch_body(&[format!("POST {url} HTTP/1.1\r\n\r\n{{}}")], true);
    let (status, answer) = batch(&mut socket, &body).await;
    assert!(status == 202 || status == 400, "{answer}");
    assert!(answer.len() < 4096, "an answer of {} bytes", answer.len());
    // Past Azure's 4 MiB body limit: 413 as soon as the length is announced, as Azure answers,
    // whatever --max-message-mib allows; the body is never read.
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let head = format!(
        "POST /devstoreaccount1/Capped HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        4 * MIB + 1
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let (status, answer) = read_answer(&mut socket).await;
    assert_eq!(status, 413, "{answer}");
    assert!(has_code(&answer, "RequestBodyTooLarge"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datetimes_outside_azures_range_and_duplicate_keys_are_refused() {
    let (_server, rest) = server(|_| {}).await;
    create_table(rest, "Exact").await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    for year in ["0000", "0001", "1600"] {
        let body = format!(
            r#"{{"PartitionKey":"p","RowKey":"{year}","When@odata.type":"Edm.DateTime","When":"{year}-06-01T00:00:00Z"}}"#
        );
        let (status, answer) = exchange(
            &mut socket,
            "POST",
            "/devstoreaccount1/Exact",
            body.as_bytes(),
        )
        .await;
        assert_eq!(status, 400, "{year}: {answer}");
        assert!(
            has_code(&answer, "OutOfRangeInput") || has_code(&answer, "InvalidInput"),
            "{answer}"
        );
    }
    let body = r#"{"PartitionKey":"p","RowKey":"1601","When@odata.type":"Edm.DateTime","When":"1601-01-01T00:00:00Z"}"#;
    let (status, answer) = exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Exact",
        body.as_bytes(),
    )
    .await;
    assert_eq!(status, 201, "{answer}");

    for body in [
        r#"{"PartitionKey":"p","PartitionKey":"q","RowKey":"r"}"#,
        r#"{"PartitionKey":"p","RowKey":"r","RowKey":"s"}"#,
        r#"{"PartitionKey":"p","RowKey":"r","A":1,"A":2}"#,
    ] {
        let (status, answer) = exchange(
            &mut socket,
            "POST",
            "/devstoreaccount1/Exact",
            body.as_bytes(),
        )
        .await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.contains("twice"), "{answer}");
    }
}

/// A `$batch` body of one changeset holding `requests` (closed when `closed`).
fn batch_body(requests: &[String], closed: bool) -> String {
    let mut body =
        String::from("--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n");
    for request in requests {
        body.push_str(&format!(
            "--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n{request}\r\n"
        ));
    }
    if closed {
        body.push_str("--changeset_c--\r\n--batch_b--\r\n");
    }
    body
}

async fn batch(socket: &mut TcpStream, body: &str) -> (u16, String) {
    let head = format!(
        "POST /devstoreaccount1/$batch HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: multipart/mixed; boundary=batch_b\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body.as_bytes()).await.unwrap();
    read_answer(socket).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_exactly_one_well_formed_changeset() {
    let (_server, rest) = server(|_| {}).await;
    create_table(rest, "Batched").await;
    let mut socket = TcpStream::connect(rest).await.unwrap();
    let insert = |row: &str| {
        format!(
            "POST http://localhost/devstoreaccount1/Batched HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{{\"PartitionKey\":\"p\",\"RowKey\":\"{row}\"}}"
        )
    };
    // Unclosed: refused, nothing written.
    let (status, answer) = batch(&mut socket, &batch_body(&[insert("1")], false)).await;
    assert!(answer.contains("closing delimiter"), "{status}: {answer}");
    // Two changesets: refused.
    let one = batch_body(&[insert("2")], true);
    let two = one.replace("--batch_b--\r\n", &batch_body(&[insert("3")], true));
    let (status, answer) = batch(&mut socket, &two).await;
    assert!(
        answer.contains("exactly one changeset"),
        "{status}: {answer}"
    );
    // A retrieve operation: 501 as documented.
    let get = "GET http://localhost/devstoreaccount1/Batched(PartitionKey='p',RowKey='1') HTTP/1.1\r\n\r\n".to_owned();
    let (status, answer) = batch(&mut socket, &batch_body(&[get], true)).await;
    assert_eq!(status, 501, "{answer}");
    assert!(has_code(&answer, "NotImplemented"), "{answer}");
    // None of them wrote anything; a well-formed one does.
    let (status, answer) = exchange(&mut socket, "GET", "/devstoreaccount1/Batched()", b"").await;
    assert_eq!(status, 200);
    assert!(answer.contains(r#""value":[]"#), "{answer}");
    let (status, answer) = batch(&mut socket, &one).await;
    assert_eq!(status, 202, "{answer}");
    // An insert without `Prefer: return-no-content` is answered as Azure does: 201 and the entity.
    assert!(answer.contains("HTTP/1.1 201 Created\r\n"), "{answer}");
    assert!(answer.contains(r#""RowKey":"2""#), "{answer}");
    assert!(
        answer.contains("Preference-Applied: return-content"),
        "{answer}"
    );
    // Each sub-response names its entity, as Azure's do (the SDKs read its RowKey there).
    let url = "http://localhost/devstoreaccount1/Batched(PartitionKey='p',RowKey='2')";
    assert!(
        answer.contains(&format!("Location: {url}\r\nDataServiceId: {url}\r\n")),
        "{answer}"
    );
    // One retrieve alone in the batch (outside a changeset), as Azure serves it: the entity as
    // its GET answers it, or the GET's refusal, as the batch's one part.
    let retrieve = |row: &str| {
        format!(
            "--batch_b\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
             GET http://localhost/devstoreaccount1/Batched(PartitionKey='p',RowKey='{row}')?$select=RowKey HTTP/1.1\r\n\
             Accept: application/json;odata=nometadata\r\n\r\n--batch_b--\r\n"
        )
    };
    let (status, answer) = batch(&mut socket, &retrieve("2")).await;
    assert_eq!(status, 202, "{answer}");
    assert!(answer.contains("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains(r#"{"RowKey":"2"}"#), "{answer}");
    assert!(answer.contains("ETag: W/"), "{answer}");
    let (status, answer) = batch(&mut socket, &retrieve("missing")).await;
    assert_eq!(status, 202, "{answer}");
    assert!(answer.contains("HTTP/1.1 404 Not Found\r\n"), "{answer}");
    assert!(answer.contains("ResourceNotFound"), "{answer}");
    // With `Prefer: return-no-content`, 204 and no entity.
    let quiet = insert("4").replace(
        "Content-Type: application/json\r\n",
        "Content-Type: application/json\r\nPrefer: return-no-content\r\n",
    );
    let (status, answer) = batch(&mut socket, &batch_body(&[quiet], true)).await;
    assert_eq!(status, 202, "{answer}");
    assert!(answer.contains("HTTP/1.1 204 No Content\r\n"), "{answer}");
    assert!(!answer.contains(r#""RowKey":"4""#), "{answer}");
}
