//! What a new user of the SDK meets first: a `DateTime` that round-trips through JSON as RFC 3339
//! text, mapping errors that name the field and the entity, and connect errors that name the
//! endpoint and the cause.

mod common;

use common::TestServer;
use serde::{Deserialize, Serialize};
use trestle_client::{Client, DateTime, ErrorKind};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Reading {
    device: String,
    at: DateTime,
}

#[test]
fn a_datetime_is_rfc3339_text_in_json_and_reads_back_from_text_or_ticks() {
    let reading = Reading {
        device: "d1".into(),
        at: DateTime::from_unix(1_700_000_000, 123_456_700),
    };
    let json = serde_json::to_string(&reading).unwrap();
    assert_eq!(
        json,
        r#"{"device":"d1","at":"2023-11-14T22:13:20.1234567Z"}"#
    );
    assert_eq!(serde_json::from_str::<Reading>(&json).unwrap(), reading);
    let ticks = format!(r#"{{"device":"d1","at":{}}}"#, reading.at.ticks());
    assert_eq!(serde_json::from_str::<Reading>(&ticks).unwrap(), reading);
    let wrong = serde_json::from_str::<Reading>(r#"{"device":"d1","at":"yesterday"}"#);
    assert!(wrong.unwrap_err().to_string().contains("RFC 3339"));
}

/// A field no property can hold: an enum variant with data (nested structs and vectors are
/// documents, tests/documents.rs).
#[derive(Serialize)]
enum Shape {
    Circle(f64),
}

#[derive(Serialize)]
struct Unmappable {
    name: String,
    shape: Shape,
}

#[tokio::test]
async fn a_field_that_cannot_be_stored_is_named_with_the_entity() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let table = client.table("Mapped");
    table.create().await.unwrap();
    let value = Unmappable {
        name: "n".into(),
        shape: Shape::Circle(1.0),
    };
    let error = table.insert(("p1", "r1"), &value).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Mapping);
    let message = error.to_string();
    assert!(message.contains("field `shape`"), "{message}");
    assert!(
        message.contains("PartitionKey 'p1'") && message.contains("RowKey 'r1'"),
        "{message}"
    );
}

#[tokio::test]
async fn connect_errors_name_the_endpoint_and_the_cause() {
    // A port nothing listens on (privileged: no other test's server can take it meanwhile).
    let endpoint = "http://127.0.0.1:1".to_owned();
    let refused = Client::connect(endpoint.clone()).await.unwrap_err();
    let message = refused.to_string();
    assert!(message.contains(&endpoint), "{message}");
    assert!(message.to_lowercase().contains("refused"), "{message}");

    let no_scheme = Client::connect("127.0.0.1:50051").await.unwrap_err();
    assert!(
        no_scheme.to_string().contains("has no scheme"),
        "{no_scheme}"
    );

    let unknown = Client::connect("http://no-such-host.invalid:50051")
        .await
        .unwrap_err();
    let message = unknown.to_string();
    assert!(message.contains("no-such-host.invalid"), "{message}");
    assert!(
        message.len()
            > "cannot connect to http://no-such-host.invalid:50051: transport error".len(),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_scans_over_one_server_stream_as_it_pages() {
    use futures_util::TryStreamExt;
    use trestle_client::{Filter, Properties, Value};
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let logs = client.table("Logs");
    logs.create().await.unwrap();
    for partition in ["a", "b"] {
        for chunk in 0..10 {
            let mut transaction = logs.transaction(partition);
            for n in 0..100 {
                let row = format!("{:04}", chunk * 100 + n);
                let line = Properties::default().with("N", Value::Int32(chunk * 100 + n));
                transaction.insert(row.as_str(), &line).unwrap();
            }
            transaction.commit().await.unwrap();
        }
    }
    let query = || {
        logs.query::<Properties>()
            .filter(Filter::ge("N", 500))
            .page_size(64)
    };
    let scanned: Vec<_> = query().scan().try_collect().await.unwrap();
    let paged: Vec<_> = query().stream().try_collect().await.unwrap();
    assert_eq!(scanned.len(), 1000);
    let keys = |entities: &[trestle_client::Entity<Properties>]| {
        entities.iter().map(|e| e.key.clone()).collect::<Vec<_>>()
    };
    assert_eq!(keys(&scanned), keys(&paged));
    let newest: Vec<_> = logs
        .query::<Properties>()
        .partition("b")
        .reverse()
        .scan()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(newest[0].key.row_key, "0999");
    let missing = client.table("Nothing").query::<Properties>().scan();
    let error = missing.try_collect::<Vec<_>>().await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
}
