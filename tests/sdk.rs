//! The Rust SDK against the real server: every call, typed round trips, streams and transactions.

mod common;

use std::collections::BTreeMap;

use common::TestServer;
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use trestle_client::{
    from_properties, to_properties, DateTime, EntityKey, ErrorKind, Filter, IfMatch, Properties,
    UpsertMode, Value,
};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct AllTypes {
    text: String,
    small: i32,
    big: i64,
    ratio: f64,
    flag: bool,
    when: DateTime,
    id: Uuid,
    blob: Vec<u8>,
    maybe: Option<String>,
    tiny: u8,
    medium: u32,
    level: Level,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum Level {
    Junior,
    Senior,
}

fn sample() -> AllTypes {
    AllTypes {
        text: "O'Brien ✓".into(),
        small: -7,
        big: i64::MIN,
        ratio: 2.5,
        flag: true,
        when: DateTime::from_unix(1_700_000_000, 123_456_700),
        id: Uuid::from_u128(0xa455c695_df98_5678_aaaa_81d3367e5a34),
        blob: vec![0, 1, 255],
        maybe: None,
        tiny: 200,
        medium: u32::MAX,
        level: Level::Senior,
    }
}

#[test]
fn serde_keeps_azure_types() {
    let properties = to_properties(&sample()).unwrap();
    assert_eq!(properties["text"], Value::String("O'Brien ✓".into()));
    assert_eq!(properties["small"], Value::Int32(-7));
    assert_eq!(properties["big"], Value::Int64(i64::MIN));
    assert_eq!(properties["ratio"], Value::Double(2.5));
    assert_eq!(properties["flag"], Value::Bool(true));
    assert_eq!(
        properties["when"],
        Value::DateTime(DateTime::from_unix(1_700_000_000, 123_456_700))
    );
    assert_eq!(properties["id"], Value::Guid(sample().id));
    assert_eq!(properties["blob"], Value::Binary(vec![0, 1, 255]));
    assert!(
        !properties.contains_key("maybe"),
        "None is an absent property"
    );
    assert_eq!(properties["tiny"], Value::Int32(200));
    assert_eq!(properties["medium"], Value::Int64(u32::MAX.into()));
    assert_eq!(properties["level"], Value::String("Senior".into()));
    let back: AllTypes = from_properties(properties).unwrap();
    assert_eq!(back, sample());
}

#[test]
fn serde_refuses_what_cannot_be_mapped_and_maps_nested_values_to_documents() {
    #[derive(Serialize)]
    struct Nested {
        inner: Inner,
    }
    #[derive(Serialize)]
    struct Inner {
        x: i32,
    }
    #[derive(Serialize)]
    struct TooBig {
        n: u64,
    }
    #[derive(Serialize)]
    struct List {
        items: Vec<String>,
    }
    #[derive(Serialize)]
    enum Shape {
        Circle(f64),
    }
    #[derive(Serialize)]
    struct WithShape {
        shape: Shape,
    }
    // Nested structs and sequences are documents now (tests/documents.rs); these map.
    assert_eq!(
        to_properties(&Nested {
            inner: Inner { x: 1 }
        })
        .unwrap()["inner"],
        Value::Object([("x".to_owned(), Value::Int32(1))].into())
    );
    assert!(to_properties(&TooBig { n: u64::MAX })
        .unwrap_err()
        .to_string()
        .contains("Int64 range"));
    assert_eq!(
        to_properties(&List {
            items: vec!["a".into()]
        })
        .unwrap()["items"],
        Value::Array(vec!["a".into()])
    );
    assert!(to_properties(&WithShape {
        shape: Shape::Circle(1.0)
    })
    .is_err());
    assert!(
        to_properties(&42).is_err(),
        "an entity is a struct or a map"
    );

    #[derive(Debug, Deserialize)]
    struct NeedsNumber {
        #[allow(dead_code)]
        n: i32,
    }
    let wrong = BTreeMap::from([("n".to_owned(), Value::String("x".into()))]);
    assert!(from_properties::<NeedsNumber>(wrong).is_err());
    let out_of_range = BTreeMap::from([("n".to_owned(), Value::Int64(i64::MAX))]);
    assert!(from_properties::<NeedsNumber>(out_of_range).is_err());
}

#[tokio::test]
async fn typed_entities_round_trip_through_the_server() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let table = client.table("Typed");
    table.create().await.unwrap();
    table.insert(("p", "r"), &sample()).await.unwrap();
    let read = table.get::<AllTypes>(("p", "r")).await.unwrap();
    assert_eq!(read.value, sample());
    assert_eq!(read.key, EntityKey::new("p", "r"));

    let dynamic = table.get::<Properties>(("p", "r")).await.unwrap().value;
    assert_eq!(dynamic.get_str("text"), Some("O'Brien ✓"));
    assert_eq!(dynamic.get_i32("small"), Some(-7));
    assert_eq!(dynamic.get_i64("big"), Some(i64::MIN));
    assert_eq!(dynamic.get_f64("ratio"), Some(2.5));
    assert_eq!(dynamic.get_bool("flag"), Some(true));
    assert_eq!(dynamic.get_guid("id"), Some(sample().id));
    assert_eq!(dynamic.get_datetime("when"), Some(sample().when));
    assert_eq!(dynamic.get_binary("blob"), Some(&[0, 1, 255][..]));
    let written = Properties::new()
        .with("A", 1)
        .with("B", "two")
        .with("C", DateTime::from_ticks(5))
        .with("D", Uuid::nil());
    table.insert(("p", "dyn"), &written).await.unwrap();
    assert_eq!(
        table.get::<Properties>(("p", "dyn")).await.unwrap().value,
        written
    );
}

#[tokio::test]
async fn every_table_and_entity_call() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Counter {
        count: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    }
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let table = client.table("Calls");
    table.create().await.unwrap();
    assert!(table.create().await.unwrap_err().is_conflict());
    table.create_if_not_exists().await.unwrap();
    assert_eq!(client.list_tables("").await.unwrap(), ["Calls"]);

    let etag = table
        .insert(
            ("p", "c"),
            &Counter {
                count: 1,
                note: Some("first".into()),
            },
        )
        .await
        .unwrap();
    assert!(table
        .insert(
            ("p", "c"),
            &Counter {
                count: 9,
                note: None
            }
        )
        .await
        .unwrap_err()
        .is_conflict());
    assert!(table
        .get::<Counter>(("p", "missing"))
        .await
        .unwrap_err()
        .is_not_found());
    assert!(table
        .get_if_exists::<Counter>(("p", "missing"))
        .await
        .unwrap()
        .is_none());

    let etag2 = table
        .merge(
            ("p", "c"),
            &Counter {
                count: 2,
                note: None,
            },
            &etag,
        )
        .await
        .unwrap();
    assert_eq!(
        table.get::<Counter>(("p", "c")).await.unwrap().value,
        Counter {
            count: 2,
            note: Some("first".into())
        }
    );
    let stale = table
        .update(
            ("p", "c"),
            &Counter {
                count: 3,
                note: None,
            },
            &etag,
        )
        .await
        .unwrap_err();
    assert!(stale.is_precondition_failed());
    assert_eq!(
        stale.code(),
        Some(trestle_client::ErrorCode::UpdateConditionNotSatisfied)
    );
    table
        .update(
            ("p", "c"),
            &Counter {
                count: 3,
                note: None,
            },
            IfMatch::Tag(etag2),
        )
        .await
        .unwrap();
    assert_eq!(
        table.get::<Counter>(("p", "c")).await.unwrap().value,
        Counter {
            count: 3,
            note: None
        }
    );

    table
        .upsert(
            ("p", "u"),
            &Counter {
                count: 1,
                note: Some("x".into()),
            },
            UpsertMode::Replace,
        )
        .await
        .unwrap();
    table
        .upsert(
            ("p", "u"),
            &Counter {
                count: 2,
                note: None,
            },
            UpsertMode::Merge,
        )
        .await
        .unwrap();
    assert_eq!(
        table
            .get::<Counter>(("p", "u"))
            .await
            .unwrap()
            .value
            .note
            .as_deref(),
        Some("x")
    );
    table.delete(("p", "u"), IfMatch::Any).await.unwrap();
    assert!(table
        .delete(("p", "u"), IfMatch::Any)
        .await
        .unwrap_err()
        .is_not_found());

    let bad = client.table("bad_name").create().await.unwrap_err();
    assert_eq!(
        (bad.kind(), bad.code()),
        (
            ErrorKind::InvalidInput,
            Some(trestle_client::ErrorCode::OutOfRangeInput)
        )
    );
    table.delete_table().await.unwrap();
    assert!(table
        .get::<Counter>(("p", "c"))
        .await
        .unwrap_err()
        .is_not_found());
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Row {
    n: i32,
    name: String,
}

#[tokio::test]
async fn a_stream_follows_continuations_across_3000_entities() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let table = client.table("Many");
    table.create().await.unwrap();
    for p in 0..3 {
        for chunk in 0..10 {
            let mut tx = table.transaction(format!("part{p}"));
            for i in 0..100 {
                let n = chunk * 100 + i;
                tx.insert(
                    (
                        format!("part{p}"),
                        trestle_client::keys::fixed_width(n as u64, 5),
                    ),
                    &Row {
                        n,
                        name: format!("O'Name {n}"),
                    },
                )
                .unwrap();
            }
            tx.commit().await.unwrap();
        }
    }
    let all: Vec<_> = table
        .query::<Row>()
        .page_size(250)
        .stream()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 3000);
    assert!(all.windows(2).all(|w| w[0].key < w[1].key));

    let pages: Vec<_> = table
        .query::<Row>()
        .partition("part1")
        .page_size(300)
        .pages()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        pages.iter().map(|p| p.items.len()).collect::<Vec<_>>(),
        [300, 300, 300, 100]
    );
    let resumed = table
        .query::<Row>()
        .partition("part1")
        .page_size(300)
        .continue_from(pages[2].continuation.clone().unwrap())
        .all()
        .await
        .unwrap();
    assert_eq!(resumed.len(), 100);

    let escaped = table
        .query::<Row>()
        .filter(Filter::eq("name", "O'Name 7"))
        .all()
        .await
        .unwrap();
    assert_eq!(escaped.len(), 3);
    let filtered = table
        .query::<Row>()
        .partition("part2")
        .filter(Filter::ge("n", 990).and(Filter::lt("n", 995)))
        .reverse()
        .all()
        .await
        .unwrap();
    assert_eq!(
        filtered.iter().map(|e| e.value.n).collect::<Vec<_>>(),
        [994, 993, 992, 991, 990]
    );
    assert_eq!(
        table
            .query::<Row>()
            .filter(Filter::lt("n", 10))
            .count()
            .await
            .unwrap(),
        30
    );
    let prefixed = table
        .query::<Row>()
        .partition("part0")
        .row_key_prefix("0009")
        .all()
        .await
        .unwrap();
    assert_eq!(prefixed.len(), 10);
    let ranged = table
        .query::<Row>()
        .partition("part0")
        .row_key_range("00010", "00020")
        .all()
        .await
        .unwrap();
    assert_eq!(ranged.len(), 10);
    let projected = table
        .query::<Properties>()
        .partition("part0")
        .select(["n"])
        .page_size(1)
        .page()
        .await
        .unwrap();
    assert_eq!(projected.items[0].value.0.keys().collect::<Vec<_>>(), ["n"]);
    assert!(table
        .query::<Row>()
        .filter(Filter::raw("n eq 5"))
        .exists()
        .await
        .unwrap());
    let bad = table
        .query::<Row>()
        .filter(Filter::raw("n eq"))
        .all()
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Some(trestle_client::ErrorCode::InvalidInput));
}

#[tokio::test]
async fn the_transaction_builder_refuses_what_the_server_would() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let table = client.table("Txns");
    table.create().await.unwrap();
    let mut tx = table.transaction("p");
    tx.insert(
        ("p", "a"),
        &Row {
            n: 1,
            name: "a".into(),
        },
    )
    .unwrap();
    let duplicate = tx.delete(("p", "a"), IfMatch::Any).unwrap_err();
    assert_eq!(
        (duplicate.code(), duplicate.operation_index()),
        (
            Some(trestle_client::ErrorCode::InvalidDuplicateRow),
            Some(1)
        )
    );
    let elsewhere = tx
        .insert(
            ("q", "b"),
            &Row {
                n: 2,
                name: "b".into(),
            },
        )
        .unwrap_err();
    assert_eq!(
        elsewhere.code(),
        Some(trestle_client::ErrorCode::CommandsInBatchActOnDifferentPartitions)
    );
    for i in 1..100 {
        tx.check_absent(("p", format!("x{i}"))).unwrap();
    }
    let full = tx.check_absent(("p", "one-too-many")).unwrap_err();
    assert_eq!(
        (full.code(), full.operation_index()),
        (Some(trestle_client::ErrorCode::InvalidInput), Some(100))
    );
    assert_eq!(tx.len(), 100);
    let etags = tx.commit().await.unwrap();
    assert!(etags[0].is_some() && etags[1..].iter().all(Option::is_none));
    assert!(
        table.transaction("p").commit().await.is_err(),
        "empty transactions are refused"
    );

    // The server's refusal names the failing operation.
    let current = table.get::<Row>(("p", "a")).await.unwrap();
    let mut tx = table.transaction("p");
    tx.merge(
        ("p", "a"),
        &Row {
            n: 5,
            name: "a".into(),
        },
        &current.etag,
    )
    .unwrap();
    tx.check_exists(("p", "nobody"), IfMatch::Any).unwrap();
    let error = tx.commit().await.unwrap_err();
    assert_eq!(
        (error.operation_index(), error.is_not_found()),
        (Some(1), true)
    );
    assert_eq!(
        table.get::<Row>(("p", "a")).await.unwrap().value.n,
        1,
        "nothing applied"
    );

    // Every operation kind commits.
    let mut tx = table.transaction("p");
    tx.update(
        ("p", "a"),
        &Row {
            n: 2,
            name: "a2".into(),
        },
        &current.etag,
    )
    .unwrap();
    tx.upsert(
        ("p", "u"),
        &Row {
            n: 3,
            name: "u".into(),
        },
        UpsertMode::Merge,
    )
    .unwrap();
    tx.check_absent(("p", "x1")).unwrap();
    let etags = tx.commit().await.unwrap();
    assert_eq!(
        etags[0].as_ref(),
        Some(&table.get::<Row>(("p", "a")).await.unwrap().etag)
    );
    assert_eq!(table.get::<Row>(("p", "u")).await.unwrap().value.n, 3);
    assert!(etags[2].is_none());
}

#[tokio::test]
async fn reads_are_retried_while_the_server_is_unreachable_but_fail_cleanly() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let policy = trestle_client::RetryPolicy {
        max_attempts: 3,
        initial_backoff: std::time::Duration::from_millis(5),
        ..Default::default()
    };
    let connect = trestle_client::Client::builder()
        .endpoint(format!("http://{addr}"))
        .retry(policy)
        .connect()
        .await;
    assert_eq!(connect.unwrap_err().kind(), ErrorKind::Unavailable);
}
