//! What clients cannot make the server do: run more than its cap of requests at once (the rest get
//! `ServerBusy`), open more calls per connection than allowed, send messages over the size limit,
//! or keep a scan running past its deadline.

mod common;

use std::time::Duration;

use common::{
    assert_error, binary, entity, get_request, transaction, tx_insert, RawClient, TestServer,
};
use tokio_stream::StreamExt;
use tonic::Code;
use trestle_proto::pb;

const TABLE: &str = "Wide";
const ROWS: usize = 100;

/// 100 entities of 60 KiB: far more than a stream buffers, so a reader that stops reading holds
/// its scan open.
async fn load_wide(client: &mut RawClient) {
    client
        .create_table(pb::CreateTableRequest {
            table: TABLE.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for chunk in 0..ROWS / 10 {
        let ops = (0..10)
            .map(|i| {
                tx_insert(entity(
                    "p",
                    &format!("{chunk:02}-{i}"),
                    &[("Blob", binary(vec![i as u8; 60 * 1024]))],
                ))
            })
            .collect();
        client
            .submit_transaction(transaction(TABLE, "p", ops))
            .await
            .unwrap();
    }
}

fn one_at_a_time() -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: TABLE.into(),
        page_size: 1,
        ..Default::default()
    }
}

/// A stream that has delivered one batch and is then left unread.
async fn stalled_stream(client: &mut RawClient) -> tonic::Streaming<pb::ScanEntitiesResponse> {
    let mut stream = client
        .scan_entities(one_at_a_time())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.next().await.unwrap().unwrap().entities.len(), 1);
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_in_flight_cap_get_server_busy() {
    let server = TestServer::start_with(|config| config.limits.max_in_flight = 0).await;
    let mut client = server.client().await;
    let status = assert_error(
        client.get_entity(get_request(TABLE, "p", "00-0")).await,
        Code::ResourceExhausted,
        "ServerBusy",
    );
    assert!(status.message().contains("0 requests"), "{status:?}");
    // The SDK sees `Busy` (which its default policy retries).
    let busy = trestle_client::Client::builder()
        .endpoint(server.endpoint())
        .retry(trestle_client::RetryPolicy::none())
        .connect()
        .await
        .unwrap()
        .list_tables("")
        .await
        .unwrap_err();
    assert_eq!(busy.kind(), trestle_client::ErrorKind::Busy);
}

/// Streams are a class of their own: however many are open, they hold none of the permits short
/// calls need, and past their own cap they get `ServerBusy`; an abandoned one gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_their_cap_get_server_busy_and_leave_short_calls_their_permits() {
    let server = TestServer::start_with(|config| {
        config.limits.max_in_flight = 2;
        config.limits.max_open_streams = 2;
    })
    .await;
    let mut client = server.client().await;
    load_wide(&mut client).await;
    let first = stalled_stream(&mut client).await;
    let second = stalled_stream(&mut client).await;
    let status = assert_error(
        client.scan_entities(one_at_a_time()).await,
        Code::ResourceExhausted,
        "ServerBusy",
    );
    assert!(status.message().contains("2 open streams"), "{status:?}");
    for _ in 0..10 {
        client
            .get_entity(get_request(TABLE, "p", "00-0"))
            .await
            .expect("a short call beside two open streams on a cap of two requests");
    }

    drop((first, second));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client.scan_entities(one_at_a_time()).await {
            Ok(_) => break,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "abandoned streams kept their places"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_per_connection_stream_cap_wait_for_a_free_stream() {
    let server = TestServer::start_with(|config| config.limits.max_concurrent_streams = 2).await;
    let mut client = server.client().await;
    load_wide(&mut client).await;
    let first = stalled_stream(&mut client).await;
    let _second = stalled_stream(&mut client).await;

    let mut queued_client = client.clone();
    let queued = tokio::spawn(async move {
        queued_client
            .get_entity(get_request(TABLE, "p", "00-0"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !queued.is_finished(),
        "a third call ran on a 2-stream connection"
    );
    // Another connection is not held up.
    server
        .client()
        .await
        .get_entity(get_request(TABLE, "p", "00-0"))
        .await
        .unwrap();
    drop(first);
    tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .expect("the queued call ran once a stream was free")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stops_at_its_deadline() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    load_wide(&mut client).await;
    let mut request = tonic::Request::new(one_at_a_time());
    request.set_timeout(Duration::from_millis(400));
    let started = std::time::Instant::now();
    let mut stream = client.scan_entities(request).await.unwrap().into_inner();
    let (mut received, mut ended_with) = (0, None);
    while let Some(item) = stream.next().await {
        match item {
            Ok(batch) => received += batch.entities.len(),
            Err(status) => {
                ended_with = Some(status);
                break;
            }
        }
        // A reader slow enough that the whole table would take 5 s.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = ended_with.expect("the stream ran past its deadline to the end");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(common::reason(&status), "OperationTimedOut");
    assert!(received < ROWS, "received {received}");
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn messages_over_the_size_limit_are_refused_and_change_nothing() {
    let server =
        TestServer::start_with(|config| config.limits.max_message_bytes = 1024 * 1024).await;
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: TABLE.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // 23 x 60 KiB: 1.4 MiB, within the 4 MiB transaction limit but over this server's 1 MiB.
    let ops = (0..23)
        .map(|i| {
            tx_insert(entity(
                "p",
                &format!("{i}"),
                &[("Blob", binary(vec![1; 60 * 1024]))],
            ))
        })
        .collect();
    let status = client
        .submit_transaction(transaction(TABLE, "p", ops))
        .await
        .unwrap_err();
    assert!(
        matches!(status.code(), Code::ResourceExhausted | Code::OutOfRange),
        "{status:?}"
    );
    assert!(status.message().contains("too large"), "{status:?}");
    assert_error(
        client.get_entity(get_request(TABLE, "p", "0")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
}
