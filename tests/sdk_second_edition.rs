//! The SDK's second edition against the real server: read-modify-write and retries that spawn,
//! several row types in one partition, typed filters, time, unique log-tail keys, transactions
//! that know their partition, untyped counts and page stats, table-or-entity errors, connection
//! errors by kind, and the blog scenario end to end.

mod common;

use common::TestServer;
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use trestle_client::scenarios::blog::{self, Blog};
use trestle_client::{
    retry_on_conflict, AccessPolicy, Client, ConflictRetry, DateTime, ErrorCode, ErrorKind, Filter,
    IfMatch, Properties, RetryPolicy, TableClient,
};

/// A server, and an SDK handle on a new table `name` there.
async fn new_table(name: &str) -> (TestServer, TableClient) {
    let server = TestServer::start().await;
    let table = server.sdk().await.table(name);
    table.create().await.unwrap();
    (server, table)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Counter {
    n: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_and_retry_on_conflict_count_exactly_from_spawned_tasks() {
    let (_server, table) = new_table("Counters").await;
    table
        .insert(("c", "modify"), &Counter { n: 0 })
        .await
        .unwrap();
    table
        .insert(("c", "retry"), &Counter { n: 0 })
        .await
        .unwrap();

    let mut tasks = Vec::new();
    for _ in 0..20 {
        let modifier = table.clone();
        tasks.push(tokio::spawn(async move {
            modifier
                .modify::<Counter, _>(("c", "modify"), |counter| counter.n += 1)
                .await
                .map(drop)
        }));
        let writer = table.clone();
        // A hand-written read-modify-write, borrowing a &str: the future is Send.
        let key: &'static str = "retry";
        tasks.push(tokio::spawn(retry_on_conflict(
            ConflictRetry::default().with_max_attempts(100),
            move || {
                let table = writer.clone();
                async move {
                    let counter = table.get::<Counter>(("c", key)).await?;
                    let next = Counter {
                        n: counter.value.n + 1,
                    };
                    table
                        .update(("c", key), &next, IfMatch::Tag(counter.etag))
                        .await
                        .map(drop)
                }
            },
        )));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for row in ["modify", "retry"] {
        let counter = table.get::<Counter>(("c", row)).await.unwrap();
        assert_eq!(counter.value.n, 20, "{row}");
    }

    // A bound on attempts: a change that always conflicts gives up with the conflict.
    let stale = table.get::<Counter>(("c", "modify")).await.unwrap().etag;
    table
        .update(("c", "modify"), &Counter { n: 0 }, IfMatch::Any)
        .await
        .unwrap();
    let mut attempts = 0;
    let gave_up = retry_on_conflict(ConflictRetry::default().with_max_attempts(3), || {
        attempts += 1;
        let (table, stale) = (table.clone(), stale.clone());
        async move {
            table
                .update(("c", "modify"), &Counter { n: 9 }, IfMatch::Tag(stale))
                .await
        }
    })
    .await
    .unwrap_err();
    assert!(gave_up.is_precondition_failed());
    assert_eq!(attempts, 3);
    // A missing entity is not a conflict: modify fails at once.
    let missing = table
        .modify::<Counter, _>(("c", "absent"), |counter| counter.n += 1)
        .await
        .unwrap_err();
    assert!(missing.is_entity_not_found());
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Post {
    title: String,
    likes: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Kind")]
enum Row {
    Post { title: String, likes: i64 },
    Comment { text: String },
}

#[tokio::test]
async fn several_row_types_in_one_partition() {
    let (_server, table) = new_table("Mixed").await;
    table
        .insert(
            ("p", "a-post"),
            &Row::Post {
                title: "Hi".into(),
                likes: 3,
            },
        )
        .await
        .unwrap();
    table
        .insert(
            ("p", "b-comment"),
            &Row::Comment {
                text: "Nice".into(),
            },
        )
        .await
        .unwrap();

    // As the enum: both.
    let rows = table.query::<Row>().partition("p").all().await.unwrap();
    assert_eq!(rows.len(), 2);
    // As one struct: the error names the row that does not decode.
    let failed = table
        .query::<Post>()
        .partition("p")
        .all()
        .await
        .unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::Mapping);
    assert!(
        failed.message().contains("RowKey 'b-comment'"),
        "{}",
        failed.message()
    );
    // Skipping what does not decode, and listing it.
    let page = table
        .query::<Post>()
        .partition("p")
        .skip_undecodable()
        .page()
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.undecodable.len(), 1);
    assert!(page.undecodable[0].message().contains("b-comment"));
    let skipped: Vec<_> = table
        .query::<Post>()
        .partition("p")
        .skip_undecodable()
        .stream()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(skipped.len(), 1);
    // Entity::map keeps the key and ETag.
    let first = rows.into_iter().next().unwrap();
    let (key, etag) = (first.key.clone(), first.etag.clone());
    let title = first.map(|row| match row {
        Row::Post { title, .. } => title,
        Row::Comment { text } => text,
    });
    assert_eq!(
        (title.key, title.etag, title.value),
        (key, etag, "Hi".into())
    );
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Scored {
    small: i32,
    big: i64,
    ratio: f64,
    unsigned: u32,
}

#[tokio::test]
async fn typed_filters_match_whatever_integer_the_value_is_written_with() {
    let (_server, table) = new_table("Scores").await;
    for n in 0..5 {
        let scored = Scored {
            small: n,
            big: i64::from(n),
            ratio: f64::from(n),
            unsigned: n as u32,
        };
        table.insert(("p", format!("r{n}")), &scored).await.unwrap();
    }
    let count = |filter: Filter| {
        let table = table.clone();
        async move { table.entities().filter(filter).count().await.unwrap() }
    };
    let field = Filter::field::<Scored>;
    assert_eq!(count(field("small").ge(3i64)).await, 2);
    assert_eq!(count(field("big").ge(3)).await, 2);
    assert_eq!(count(field("big").ge(3u8)).await, 2);
    assert_eq!(count(field("ratio").ge(3)).await, 2);
    assert_eq!(count(field("unsigned").ge(3u32)).await, 2);
    assert_eq!(count(field("unsigned").ge(3)).await, 2);
    // Untyped, a literal of another type than the property's matches nothing, as on Azure.
    assert_eq!(
        count(Filter::ge("big", 3)).await,
        2,
        "Int32 widens to Int64"
    );
    assert_eq!(
        count(Filter::ge("small", 3i64)).await,
        0,
        "Int64 never narrows"
    );
}

#[tokio::test]
async fn transactions_take_row_keys_and_queries_count_untyped_with_stats() {
    let (server, table) = new_table("Rows").await;
    let mut tx = table.transaction("p");
    tx.insert("comment-1", &Counter { n: 1 }).unwrap();
    tx.insert(String::from("comment-2"), &Counter { n: 2 })
        .unwrap();
    tx.insert(("p", "comment-3"), &Counter { n: 3 }).unwrap();
    let elsewhere = tx
        .insert(("q", "comment-4"), &Counter { n: 4 })
        .unwrap_err();
    assert_eq!(
        elsewhere.code(),
        Some(ErrorCode::CommandsInBatchActOnDifferentPartitions)
    );
    tx.commit().await.unwrap();

    assert_eq!(table.entities().partition("p").count().await.unwrap(), 3);
    let page = table
        .entities()
        .partition("p")
        .filter(Filter::ge("n", 2))
        .page()
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.stats.plan, "partition");
    assert_eq!(page.stats.entities_examined, 3);

    let no_table = server
        .sdk()
        .await
        .table("Missing")
        .get::<Properties>(("p", "r"))
        .await
        .unwrap_err();
    assert!(no_table.is_table_not_found() && !no_table.is_entity_not_found());
    let no_entity = table.get::<Properties>(("p", "r")).await.unwrap_err();
    assert!(no_entity.is_entity_not_found() && !no_entity.is_table_not_found());
    assert!(no_table.is_not_found() && no_entity.is_not_found());
}

#[test]
fn time_has_rfc3339_text_both_ways() {
    let t = DateTime::from_unix(1_700_000_000, 123_456_700);
    assert_eq!(t.to_string(), "2023-11-14T22:13:20.1234567Z");
    assert_eq!(
        "2023-11-14T22:13:20.1234567Z".parse::<DateTime>().unwrap(),
        t
    );
    assert_eq!(
        "2023-11-14T22:13:20Z".parse::<DateTime>().unwrap(),
        DateTime::from_unix(1_700_000_000, 0)
    );
    let bad = "yesterday".parse::<DateTime>().unwrap_err();
    assert!(bad.to_string().contains("RFC 3339"), "{bad}");

    // The optional chrono and time conversions (features of trestle-client), both ways.
    let before_1970 = DateTime::from_unix(-1_000_000_000, 500_000_000);
    for t in [t, before_1970] {
        let via_chrono: chrono::DateTime<chrono::Utc> = t.into();
        assert_eq!(DateTime::from(via_chrono), t);
        assert_eq!(
            via_chrono
                .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                .len(),
            30
        );
        let via_time: time::OffsetDateTime = t.into();
        assert_eq!(DateTime::from(via_time), t);
    }
}

#[tokio::test]
async fn connection_errors_are_known_by_their_kind() {
    // A port nothing listens on (port 1 is privileged; an ephemeral port just released can be
    // taken by another test's server before the connect).
    let addr = "127.0.0.1:1";
    let refused = Client::builder()
        .endpoint(format!("http://{addr}"))
        .retry(RetryPolicy::none())
        .connect()
        .await
        .unwrap_err();
    assert!(refused.is_connect_error());
    assert_eq!(refused.kind(), ErrorKind::Unavailable);

    let server = TestServer::start().await;
    let client = server.sdk().await;
    let refused_by_server = client.table("Missing").get::<Properties>(("p", "r")).await;
    assert!(!refused_by_server.unwrap_err().is_connect_error());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blog_scenario_runs_end_to_end() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let report = blog::tour(&Blog::new(client.table("Blog"))).await.unwrap();
    assert_eq!(report.len(), 5, "{report:#?}");
    assert!(
        report[1].contains("counts 20 comments, holds 20 and embeds the 3 most recent"),
        "{report:#?}"
    );
    assert!(report[2].contains("Poetical science"), "{report:#?}");
    assert!(report[3].contains("[\"Bernoulli\"]"), "{report:#?}");
    assert!(report[4].contains("2 posts left, 0 rows"), "{report:#?}");
}

#[tokio::test]
async fn a_tables_stored_access_policies_are_set_read_and_checked() {
    let (_server, table) = new_table("Policies").await;
    let expiry = DateTime::from_unix(4_000_000_000, 0);
    let kept = table
        .set_access_policies(&[
            AccessPolicy::new("readers", "r", expiry),
            AccessPolicy {
                start: Some(DateTime::from_unix(1_700_000_000, 0)),
                ..AccessPolicy::new("writers", "dua", expiry)
            },
        ])
        .await
        .unwrap();
    assert_eq!(kept[1].permissions, "aud", "kept in raud order");
    assert_eq!(table.access_policies().await.unwrap(), kept);
    let refused = table
        .set_access_policies(&[AccessPolicy::new("readers", "rw", expiry)])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::InvalidInput), "{refused}");
    assert_eq!(
        table.access_policies().await.unwrap(),
        kept,
        "nothing changed"
    );
    assert!(table.set_access_policies(&[]).await.unwrap().is_empty());
    assert!(table.access_policies().await.unwrap().is_empty());
}
