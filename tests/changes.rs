//! Change feeds end to end (both stores): a record for every kind of write with the entity as
//! stored, a transaction's records together under one id (across tables too), a cursor resuming
//! with no gap and no duplicate, a follower seeing a commit at once, the feed turned on for an
//! existing table, and refusals.

mod common;

use std::time::{Duration, Instant};

use common::{entity, int32, string, tx_delete, tx_insert, TestServer};
use tonic::Code;
use trestle_proto::pb;
use trestle_server::storage::StoreConfig;

type Client = common::RawClient;

async fn create(client: &mut Client, table: &str, change_feed: bool) {
    client
        .create_table(pb::CreateTableRequest {
            table: table.into(),
            change_feed,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Every record of `table`'s feed after `cursor`, without following.
async fn read_all(client: &mut Client, table: &str, cursor: &str) -> Vec<pb::Change> {
    try_read_all(client, table, cursor).await.unwrap()
}

/// [`read_all`], or the status the read ended with (a trim passing the reader mid-read ends it
/// with `ChangeFeedCursorExpired`).
async fn try_read_all(
    client: &mut Client,
    table: &str,
    cursor: &str,
) -> Result<Vec<pb::Change>, tonic::Status> {
    let mut stream = client
        .read_changes(pb::ReadChangesRequest {
            table: table.into(),
            cursor: cursor.into(),
            follow: false,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut changes = Vec::new();
    while let Some(batch) = stream.message().await? {
        assert_eq!(
            batch.cursor,
            batch.changes.last().map(|c| c.cursor.clone()).unwrap()
        );
        changes.extend(batch.changes);
    }
    Ok(changes)
}

async fn describe(client: &mut Client, table: &str) -> pb::Table {
    let request = pb::GetTableRequest {
        table: table.into(),
    };
    client.get_table(request).await.unwrap().into_inner()
}

fn kind(change: &pb::Change) -> pb::ChangeKind {
    pb::ChangeKind::try_from(change.kind).unwrap()
}

async fn insert(client: &mut Client, table: &str, pk: &str, rk: &str, n: i32) -> pb::Entity {
    client
        .insert_entity(common::insert_request(
            table,
            entity(pk, rk, &[("N", int32(n))]),
        ))
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn every_write_is_recorded_with_the_entity_as_stored_and_transactions_together() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Orders", true).await;
    create(&mut client, "Lines", true).await;
    let inserted = insert(&mut client, "Orders", "p", "a", 1).await;
    let replaced = client
        .update_entity(pb::UpdateEntityRequest {
            table: "Orders".into(),
            entity: Some(entity("p", "a", &[("N", int32(2))])),
            if_match: inserted.etag.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    client
        .merge_entity(pb::MergeEntityRequest {
            table: "Orders".into(),
            entity: Some(entity("p", "a", &[("Name", string("Ada"))])),
            if_match: "*".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for (rk, mode) in [
        ("b", pb::UpsertMode::Replace),
        ("a", pb::UpsertMode::Replace),
    ] {
        client
            .upsert_entity(pb::UpsertEntityRequest {
                table: "Orders".into(),
                entity: Some(entity("p", rk, &[("N", int32(3))])),
                mode: mode as i32,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    client
        .patch_entity(pb::PatchEntityRequest {
            table: "Orders".into(),
            partition_key: "p".into(),
            row_key: "a".into(),
            operations: vec![pb::PatchStep {
                step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
                    property: "N".into(),
                    by: Some(int32(1)),
                })),
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    client
        .delete_entity(pb::DeleteEntityRequest {
            idempotency_key: String::new(),
            table: "Orders".into(),
            partition_key: "p".into(),
            row_key: "b".into(),
            if_match: "*".into(),
        })
        .await
        .unwrap();
    // A refused write records nothing.
    client
        .insert_entity(common::insert_request(
            "Orders",
            entity("p", "a", &[("N", int32(9))]),
        ))
        .await
        .unwrap_err();
    client
        .submit_transaction(common::transaction(
            "Orders",
            "q",
            vec![
                tx_insert(entity("q", "1", &[("N", int32(1))])),
                tx_insert(entity("q", "2", &[("N", int32(2))])),
            ],
        ))
        .await
        .unwrap();
    let across = |table: &str, rk: &str| pb::TableOperation {
        table: table.into(),
        partition_key: "x".into(),
        operation: Some(tx_insert(entity("x", rk, &[("N", int32(5))]))),
    };
    client
        .transact_write(pb::TransactWriteRequest {
            idempotency_key: String::new(),
            operations: vec![across("Orders", "1"), across("Lines", "1")],
        })
        .await
        .unwrap();
    client
        .submit_transaction(common::transaction(
            "Orders",
            "q",
            vec![tx_delete("1", "*"), tx_delete("2", "*")],
        ))
        .await
        .unwrap();

    let changes = read_all(&mut client, "Orders", "").await;
    use pb::ChangeKind::{Delete, Insert, Merge, Patch, Replace};
    let seen: Vec<(pb::ChangeKind, &str, &str)> = changes
        .iter()
        .map(|c| (kind(c), c.partition_key.as_str(), c.row_key.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (Insert, "p", "a"),
            (Replace, "p", "a"),
            (Merge, "p", "a"),
            (Insert, "p", "b"),
            (Replace, "p", "a"),
            (Patch, "p", "a"),
            (Delete, "p", "b"),
            (Insert, "q", "1"),
            (Insert, "q", "2"),
            (Insert, "x", "1"),
            (Delete, "q", "1"),
            (Delete, "q", "2"),
        ]
    );
    // The entity as stored: the write's own ETag, and nothing for a delete.
    assert_eq!(changes[0].entity.as_ref().unwrap().etag, inserted.etag);
    assert_eq!(changes[1].entity.as_ref().unwrap().etag, replaced.etag);
    let merged = changes[2].entity.as_ref().unwrap();
    assert!(merged.properties.contains_key("N") && merged.properties.contains_key("Name"));
    assert!(changes[6].entity.is_none());
    // One id per transaction, shared by its records; ids grow.
    let ids: Vec<u64> = changes.iter().map(|c| c.transaction_id).collect();
    assert_eq!(ids[7], ids[8]);
    assert_eq!(ids[10], ids[11]);
    assert!(ids.windows(2).all(|w| w[0] <= w[1]), "{ids:?}");
    assert_eq!(
        ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
        10
    );
    let lines = read_all(&mut client, "Lines", "").await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].transaction_id, ids[9], "one id across tables");

    // Resuming after any record gives exactly the rest.
    for (at, change) in changes.iter().enumerate() {
        let rest = read_all(&mut client, "Orders", &change.cursor).await;
        assert_eq!(rest, changes[at + 1..], "after record {at}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sees_each_commit_at_once_and_many_in_order() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Alarms", true).await;
    let mut follower = client
        .read_changes(pb::ReadChangesRequest {
            table: "Alarms".into(),
            follow: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut slowest = Duration::ZERO;
    for n in 0..20 {
        let started = Instant::now();
        insert(&mut client, "Alarms", "site", &format!("{n:03}"), n).await;
        let batch = tokio::time::timeout(Duration::from_secs(10), follower.message())
            .await
            .expect("the follower got the change")
            .unwrap()
            .unwrap();
        slowest = slowest.max(started.elapsed());
        assert_eq!(batch.changes.len(), 1);
        assert_eq!(batch.changes[0].row_key, format!("{n:03}"));
    }
    eprintln!("slowest write-to-follower latency: {slowest:?}");
    // 40 writers at once: the follower sees each change once.
    let writers: Vec<_> = (0..40)
        .map(|n| {
            let mut client = client.clone();
            tokio::spawn(async move {
                insert(&mut client, "Alarms", "burst", &format!("{n:03}"), n).await
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 40 {
        let batch = tokio::time::timeout(Duration::from_secs(10), follower.message())
            .await
            .expect("the follower got the burst")
            .unwrap()
            .unwrap();
        for change in batch.changes {
            assert!(
                seen.insert(change.row_key.clone()),
                "twice: {}",
                change.row_key
            );
        }
    }
}

/// A feed that keeps before images gives each record the entity as it was: for every change of
/// a row, the entity the row's previous record stored (ETag and Timestamp included), none for an
/// insert. Turned on for an existing feed, from the next commit on; GetTable shows it.
#[tokio::test]
async fn before_images_show_each_entity_as_it_was() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let described = client
        .create_table(pb::CreateTableRequest {
            table: "Audit".into(),
            change_feed: true,
            change_feed_before_images: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(described.change_feed && described.change_feed_before_images);
    let inserted = insert(&mut client, "Audit", "p", "a", 1).await;
    client
        .update_entity(pb::UpdateEntityRequest {
            table: "Audit".into(),
            entity: Some(entity("p", "a", &[("N", int32(2))])),
            if_match: inserted.etag,
            ..Default::default()
        })
        .await
        .unwrap();
    client
        .merge_entity(pb::MergeEntityRequest {
            table: "Audit".into(),
            entity: Some(entity("p", "a", &[("Name", string("Ada"))])),
            if_match: "*".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    client
        .submit_transaction(common::transaction(
            "Audit",
            "p",
            vec![
                tx_insert(entity("p", "b", &[("N", int32(5))])),
                common::tx_merge(entity("p", "a", &[("N", int32(3))]), "*"),
            ],
        ))
        .await
        .unwrap();
    let across = |pk: &str, operation| pb::TableOperation {
        table: "Audit".into(),
        partition_key: pk.into(),
        operation: Some(operation),
    };
    client
        .transact_write(pb::TransactWriteRequest {
            idempotency_key: String::new(),
            operations: vec![
                across(
                    "p",
                    common::tx_merge(entity("p", "b", &[("M", int32(1))]), "*"),
                ),
                across("q", tx_insert(entity("q", "c", &[("N", int32(7))]))),
            ],
        })
        .await
        .unwrap();
    for row_key in ["a", "b"] {
        client
            .delete_entity(pb::DeleteEntityRequest {
                idempotency_key: String::new(),
                table: "Audit".into(),
                partition_key: "p".into(),
                row_key: row_key.into(),
                if_match: "*".into(),
            })
            .await
            .unwrap();
    }
    let changes = read_all(&mut client, "Audit", "").await;
    let kinds: Vec<_> = changes
        .iter()
        .map(|c| (kind(c), c.row_key.as_str()))
        .collect();
    use pb::ChangeKind::*;
    assert_eq!(
        kinds,
        [
            (Insert, "a"),
            (Replace, "a"),
            (Merge, "a"),
            (Insert, "b"),
            (Merge, "a"),
            (Merge, "b"),
            (Insert, "c"),
            (Delete, "a"),
            (Delete, "b")
        ]
    );
    let mut last: std::collections::HashMap<&str, Option<pb::Entity>> = Default::default();
    for change in &changes {
        let previous = last.remove(change.row_key.as_str()).flatten();
        assert_eq!(change.before, previous, "{change:?}");
        last.insert(&change.row_key, change.entity.clone());
    }
    assert_eq!(
        changes[4].before.as_ref().unwrap().properties["Name"],
        string("Ada"),
        "the before image is the whole entity"
    );

    // A feed without them, then with them from the next commit on.
    create(&mut client, "Plain", true).await;
    insert(&mut client, "Plain", "p", "a", 1).await;
    client
        .upsert_entity(pb::UpsertEntityRequest {
            table: "Plain".into(),
            entity: Some(entity("p", "a", &[("N", int32(2))])),
            ..Default::default()
        })
        .await
        .unwrap();
    client
        .set_change_feed(pb::SetChangeFeedRequest {
            table: "Plain".into(),
            enabled: true,
            before_images: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let described = describe(&mut client, "Plain").await;
    assert!(described.change_feed_before_images);
    client
        .upsert_entity(pb::UpsertEntityRequest {
            table: "Plain".into(),
            entity: Some(entity("p", "a", &[("N", int32(3))])),
            ..Default::default()
        })
        .await
        .unwrap();
    let changes = read_all(&mut client, "Plain", "").await;
    let befores: Vec<bool> = changes.iter().map(|c| c.before.is_some()).collect();
    assert_eq!(befores, [false, false, true]);
    assert_eq!(changes[2].before, changes[1].entity);
}

/// A read without `follow` shows every write acknowledged before it began. Over PostgreSQL, a
/// record becomes readable once every transaction that may write the table's records and took
/// its id before it has ended: the read waits for one still running (holding the table's lock,
/// as every commit to it does), and not for any other transaction of the cluster, however long
/// it runs.
#[tokio::test]
async fn a_read_shows_every_write_acknowledged_before_it() {
    let (server, database) = start_with_database().await;
    let mut client = server.client().await;
    create(&mut client, "Orders", true).await;
    // Another client's transaction, with an id, running throughout.
    let unrelated = database.clone().map(|url| hold_transaction(url, ""));
    insert(&mut client, "Orders", "o", "1", 1).await;
    let changes = tokio::time::timeout(Duration::from_secs(5), read_all(&mut client, "Orders", ""))
        .await
        .expect("a transaction that writes no record of the table keeps no reader waiting");
    let rows: Vec<&str> = changes.iter().map(|c| c.row_key.as_str()).collect();
    assert_eq!(rows, ["1"]);

    // A transaction holding the table's lock, as a commit to it does, with an id below the
    // next write's.
    let writer = database.map(|url| {
        hold_transaction(
            url,
            "SELECT pg_advisory_xact_lock_shared(29810, (id % 2147483647)::int4)
             FROM trestle_tables WHERE folded = 'orders' AND live",
        )
    });
    insert(&mut client, "Orders", "o", "2", 2).await;
    let reading = tokio::spawn(async move { read_all(&mut client, "Orders", "").await });
    if let Some(writer) = writer {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !reading.is_finished(),
            "the read waits for the transaction that may write the table's records"
        );
        writer.end();
    }
    let changes = tokio::time::timeout(Duration::from_secs(5), reading)
        .await
        .expect("the read ends once the running transaction has")
        .unwrap();
    let rows: Vec<&str> = changes.iter().map(|c| c.row_key.as_str()).collect();
    assert_eq!(rows, ["1", "2"]);
    if let Some(unrelated) = unrelated {
        unrelated.end();
    }
}

/// Over PostgreSQL, a follower that has caught up with an idle feed looks for new records with
/// an index probe, not by computing the feed's horizon (which reads `pg_locks`, taking every lock
/// manager partition of the cluster): the horizon is computed only when a record is there to be
/// shown. Counted by the database's own statistics of the schema's function.
#[tokio::test]
async fn an_idle_follower_does_not_compute_the_feed_horizon() {
    let (server, database) = start_with_database().await;
    let Some(url) = database else {
        return;
    };
    let mut client = server.client().await;
    create(&mut client, "Quiet", true).await;
    insert(&mut client, "Quiet", "q", "1", 1).await;
    let mut follower = client
        .read_changes(pb::ReadChangesRequest {
            table: "Quiet".into(),
            follow: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = follower.message().await.unwrap().unwrap();
    assert_eq!(first.changes.len(), 1);
    let horizons = move || {
        let mut observer = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        observer
            .query_one(
                "SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_user_functions
                 WHERE funcname = 'trestle_feed_horizon'",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
    };
    // The server's connections send their statistics at most once a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = tokio::task::spawn_blocking(horizons.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = tokio::task::spawn_blocking(horizons.clone()).await.unwrap();
    assert!(
        after - before < 20,
        "an idle follower computed the horizon {} times in 3 s",
        after - before
    );
    // A new record still reaches it at once.
    insert(&mut client, "Quiet", "q", "2", 2).await;
    let next = tokio::time::timeout(Duration::from_secs(5), follower.message())
        .await
        .expect("the follower got the change")
        .unwrap()
        .unwrap();
    assert_eq!(next.changes[0].row_key, "2");
}

/// A server, and the URL of its PostgreSQL database (`None` on sled).
async fn start_with_database() -> (TestServer, Option<String>) {
    let mut database = None;
    let server = TestServer::start_with(|config| {
        if let StoreConfig::Postgres { url, .. } = &config.store {
            database = Some(url.clone());
        }
    })
    .await;
    (server, database)
}

/// A transaction running on a connection of its own until [`HeldTransaction::end`].
struct HeldTransaction {
    end: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl HeldTransaction {
    fn end(self) {
        self.end.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

/// Begins a transaction on the database at `url` that runs `first` (if not empty) and then takes
/// an id, and holds it open.
fn hold_transaction(url: String, first: &'static str) -> HeldTransaction {
    let (began, end) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let thread = std::thread::spawn(move || {
        let mut other = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut transaction = other.transaction().unwrap();
        if !first.is_empty() {
            transaction.batch_execute(first).unwrap();
        }
        transaction
            .query("SELECT pg_current_xact_id()", &[])
            .unwrap();
        began.0.send(()).unwrap();
        end.1.recv().unwrap();
        transaction.commit().unwrap();
    });
    began.1.recv().unwrap();
    HeldTransaction { end: end.0, thread }
}

#[tokio::test]
async fn the_feed_can_be_turned_on_and_bad_requests_are_refused() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Plain", false).await;
    insert(&mut client, "Plain", "p", "before", 1).await;
    let refused = client
        .read_changes(pb::ReadChangesRequest {
            table: "Plain".into(),
            ..Default::default()
        })
        .await;
    common::assert_error(refused, Code::InvalidArgument, "InvalidInput");
    client
        .set_change_feed(pb::SetChangeFeedRequest {
            table: "Plain".into(),
            enabled: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let described = describe(&mut client, "Plain").await;
    assert!(described.change_feed);
    insert(&mut client, "Plain", "p", "after", 2).await;
    let changes = read_all(&mut client, "Plain", "").await;
    let rows: Vec<&str> = changes.iter().map(|c| c.row_key.as_str()).collect();
    assert_eq!(
        rows,
        ["after"],
        "only what was written once the feed was on"
    );
    for cursor in ["nonsense", "1", "1-x", "-1-2"] {
        let refused = client
            .read_changes(pb::ReadChangesRequest {
                table: "Plain".into(),
                cursor: cursor.into(),
                ..Default::default()
            })
            .await;
        common::assert_error(refused, Code::InvalidArgument, "InvalidInput");
    }
    let missing = client
        .read_changes(pb::ReadChangesRequest {
            table: "Nowhere".into(),
            ..Default::default()
        })
        .await;
    common::assert_error(missing, Code::NotFound, "TableNotFound");
    // Turned off, the feed keeps its records and writes no more.
    client
        .set_change_feed(pb::SetChangeFeedRequest {
            table: "Plain".into(),
            enabled: false,
            ..Default::default()
        })
        .await
        .unwrap();
    insert(&mut client, "Plain", "p", "off", 3).await;
    client
        .set_change_feed(pb::SetChangeFeedRequest {
            table: "Plain".into(),
            enabled: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let changes = read_all(&mut client, "Plain", "").await;
    let rows: Vec<&str> = changes.iter().map(|c| c.row_key.as_str()).collect();
    assert_eq!(rows, ["after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_past_the_retention_go_and_a_cursor_they_passed_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let too_long = client
        .create_table(pb::CreateTableRequest {
            table: "Brief".into(),
            change_feed: true,
            change_feed_retention_seconds: 30 * 24 * 3600 + 1,
            ..Default::default()
        })
        .await;
    common::assert_error(too_long, Code::InvalidArgument, "InvalidInput");
    client
        .create_table(pb::CreateTableRequest {
            table: "Brief".into(),
            change_feed: true,
            change_feed_retention_seconds: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let described = client
        .get_table(pb::GetTableRequest {
            table: "Brief".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(described.change_feed_retention_seconds, 1);
    insert(&mut client, "Brief", "p", "old-1", 1).await;
    insert(&mut client, "Brief", "p", "old-2", 2).await;
    let first = read_all(&mut client, "Brief", "").await;
    assert_eq!(first.len(), 2);
    let passed = first[0].cursor.clone();
    // The background trim runs every second; the records are a second old after one.
    let started = Instant::now();
    while !read_all(&mut client, "Brief", "").await.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "never trimmed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    insert(&mut client, "Brief", "p", "new", 3).await;
    let rows: Vec<String> = read_all(&mut client, "Brief", "")
        .await
        .into_iter()
        .map(|c| c.row_key)
        .collect();
    assert_eq!(rows, ["new"]);
    let expired = client
        .read_changes(pb::ReadChangesRequest {
            table: "Brief".into(),
            cursor: passed,
            ..Default::default()
        })
        .await;
    common::assert_error(expired, Code::OutOfRange, "ChangeFeedCursorExpired");
    // A cursor at the last trimmed record missed nothing.
    let rows: Vec<String> = read_all(&mut client, "Brief", &first[1].cursor)
        .await
        .into_iter()
        .map(|c| c.row_key)
        .collect();
    assert_eq!(rows, ["new"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_past_its_retention_goes_from_its_start_in_batches_up_to_the_first_young_record() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Bulk", true).await;
    // 2,500 records: more than one trimming step (1,000) removes.
    for batch in 0..25 {
        let pk = format!("p{batch}");
        let inserts = (0..100)
            .map(|n| tx_insert(entity(&pk, &format!("{n:03}"), &[("N", int32(n))])))
            .collect();
        client
            .submit_transaction(common::transaction("Bulk", &pk, inserts))
            .await
            .unwrap();
    }
    let first = read_all(&mut client, "Bulk", "").await;
    assert_eq!(first.len(), 2_500);
    let (oldest, newest) = (
        first[0].cursor.clone(),
        first.last().unwrap().cursor.clone(),
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    insert(&mut client, "Bulk", "z", "young", 1).await;
    // Their retention is a day; now 3 s: the 2,500 are past it, the young one is not for 3 s.
    client
        .set_change_feed(pb::SetChangeFeedRequest {
            table: "Bulk".into(),
            enabled: true,
            retention_seconds: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(20), "never trimmed");
        // The trim may pass this read while it streams: the reader then reads from the start.
        let rows: Vec<String> = match try_read_all(&mut client, "Bulk", "").await {
            Ok(changes) => changes.into_iter().map(|c| c.row_key).collect(),
            Err(status) if status.code() == Code::OutOfRange => continue,
            Err(status) => panic!("{status:?}"),
        };
        if rows == ["young"] {
            break;
        }
        assert!(!rows.is_empty(), "the young record went with the old ones");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let expired = client
        .read_changes(pb::ReadChangesRequest {
            table: "Bulk".into(),
            cursor: oldest,
            ..Default::default()
        })
        .await;
    common::assert_error(expired, Code::OutOfRange, "ChangeFeedCursorExpired");
    let after_newest = read_all(&mut client, "Bulk", &newest).await;
    assert_eq!(after_newest.len(), 1, "a cursor at the last removed record");
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Alarm {
    n: i32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_streams_typed_changes_of_a_partition_and_resumes_from_a_saved_cursor() {
    use futures_util::TryStreamExt;
    use trestle_client::{ChangeKind, FeedCursor};
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let alarms = server.sdk().await.table("Alarms");
    alarms.create().await.unwrap();
    alarms.set_change_feed(true, 3600).await.unwrap();
    insert(&mut client, "Alarms", "site-1", "a", 1).await;
    insert(&mut client, "Alarms", "site-2", "b", 2).await;
    let now = alarms.changes().cursor_now().await.unwrap();
    insert(&mut client, "Alarms", "site-1", "c", 3).await;

    let site_1: Vec<_> = alarms
        .changes()
        .partition("site-1")
        .stream::<Alarm>()
        .try_collect()
        .await
        .unwrap();
    let rows: Vec<(&str, i32)> = site_1
        .iter()
        .map(|c| (c.key.row_key.as_str(), c.entity.as_ref().unwrap().value.n))
        .collect();
    assert_eq!(rows, [("a", 1), ("c", 3)]);
    assert!(site_1.iter().all(|c| c.kind == ChangeKind::Insert));

    // A worker saves its cursor as text and resumes from it: only what came after.
    let saved = site_1[0].cursor.to_string();
    let resumed: Vec<_> = alarms
        .changes()
        .from(saved.parse::<FeedCursor>().unwrap())
        .stream::<Alarm>()
        .try_collect()
        .await
        .unwrap();
    let rows: Vec<&str> = resumed.iter().map(|c| c.key.row_key.as_str()).collect();
    assert_eq!(rows, ["b", "c"]);
    let since_now: Vec<_> = alarms
        .changes()
        .from(now)
        .stream::<Alarm>()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(since_now.len(), 1);
    assert_eq!(since_now[0].key.row_key, "c");

    // A follower from now sees the next alarm as it commits (a stream opens when first polled:
    // a cursor taken first marks "now" for certain).
    let now = alarms.changes().cursor_now().await.unwrap();
    let mut follower = alarms.changes().from(now).follow().stream::<Alarm>();
    insert(&mut client, "Alarms", "site-3", "d", 4).await;
    let next = tokio::time::timeout(Duration::from_secs(10), follower.try_next())
        .await
        .expect("the follower got the alarm")
        .unwrap()
        .unwrap();
    assert_eq!(
        (next.key.row_key.as_str(), next.entity.unwrap().value.n),
        ("d", 4)
    );
    assert!("".parse::<FeedCursor>().is_err());
    let mut from_now = alarms.changes().from_now().stream::<Alarm>();
    assert!(
        from_now.try_next().await.unwrap().is_none(),
        "nothing after now"
    );
}

/// Batches are bounded in bytes, not only in records: twelve entities of 0.92 MiB, each replaced
/// once (so a record holds 1.9 MiB with its before image), read by a client with gRPC's default
/// 4 MiB message limit, from the start and following: every record arrives, a batch at a time.
#[tokio::test]
async fn feed_batches_of_large_entities_fit_a_clients_default_message_limit() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Large".into(),
            change_feed: true,
            change_feed_before_images: true,
            ..Default::default()
        })
        .await
        .unwrap();
    // Fifteen binaries of 63 KiB (Azure's bound on one is 64 KiB).
    let large = |row: &str, n: u8| {
        let names: Vec<String> = (0..15).map(|i| format!("Blob{i}")).collect();
        let blobs: Vec<(&str, pb::Value)> = names
            .iter()
            .map(|name| (name.as_str(), common::binary(vec![n; 63 * 1024])))
            .collect();
        entity("p", row, &blobs)
    };
    for n in 0..12u8 {
        let row = format!("r{n:02}");
        client
            .insert_entity(common::insert_request("Large", large(&row, n)))
            .await
            .unwrap();
        client
            .upsert_entity(pb::UpsertEntityRequest {
                table: "Large".into(),
                entity: Some(large(&row, n + 100)),
                mode: pb::UpsertMode::Replace as i32,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // A client as generated, with tonic's default 4 MiB decoding limit.
    let mut plain = pb::table_service_client::TableServiceClient::connect(server.endpoint())
        .await
        .unwrap();
    for follow in [false, true] {
        let request = pb::ReadChangesRequest {
            table: "Large".into(),
            follow,
            ..Default::default()
        };
        let mut stream = plain.read_changes(request).await.unwrap().into_inner();
        let (mut records, mut batches) = (0, 0);
        while records < 24 {
            let batch = tokio::time::timeout(Duration::from_secs(30), stream.message())
                .await
                .expect("a batch within 30 s")
                .expect("a batch under the client's limit")
                .expect("the feed holds 24 records");
            records += batch.changes.len();
            batches += 1;
        }
        assert_eq!(records, 24);
        assert!(batches >= 12, "{batches} batches");
    }
}

/// Every record of `table`'s feed `filter` lets through, and the cursor the read ended at.
async fn read_filtered(
    client: &mut Client,
    table: &str,
    filter: &str,
) -> (Vec<pb::Change>, String) {
    let request = pb::ReadChangesRequest {
        table: table.into(),
        filter: filter.into(),
        ..Default::default()
    };
    let mut stream = client.read_changes(request).await.unwrap().into_inner();
    let (mut changes, mut cursor) = (Vec::new(), String::new());
    while let Some(batch) = stream.message().await.unwrap() {
        changes.extend(batch.changes);
        cursor = batch.cursor;
    }
    (changes, cursor)
}

#[tokio::test]
async fn a_filtered_feed_shows_the_records_either_image_matches_and_moves_past_the_rest() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let create = pb::CreateTableRequest {
        table: "Sales".into(),
        change_feed: true,
        change_feed_before_images: true,
        ..Default::default()
    };
    client.create_table(create).await.unwrap();
    // A model of the table: each key's (Seller, Amount), written at random.
    let matches = |sale: Option<&(String, i32)>| sale.is_some_and(|(s, a)| s == "s7" && *a > 100);
    let mut model: std::collections::HashMap<String, (String, i32)> = Default::default();
    let mut expected = Vec::new();
    let mut seed = 7u64;
    let mut next = |below: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    for _ in 0..300 {
        let row_key = format!("r{}", next(12));
        let (seller, amount) = (["s1", "s7"][next(2) as usize], next(200) as i32);
        let before = model.get(&row_key).cloned();
        let kind = match (next(3), &before) {
            (0, Some(_)) => {
                let delete = pb::DeleteEntityRequest {
                    table: "Sales".into(),
                    partition_key: "p".into(),
                    row_key: row_key.clone(),
                    if_match: "*".into(),
                    ..Default::default()
                };
                client.delete_entity(delete).await.unwrap();
                model.remove(&row_key);
                pb::ChangeKind::Delete
            }
            (1, Some((kept_seller, _))) => {
                let merge = pb::MergeEntityRequest {
                    table: "Sales".into(),
                    entity: Some(entity("p", &row_key, &[("Amount", int32(amount))])),
                    if_match: "*".into(),
                    ..Default::default()
                };
                client.merge_entity(merge).await.unwrap();
                model.insert(row_key.clone(), (kept_seller.clone(), amount));
                pb::ChangeKind::Merge
            }
            _ => {
                let properties = [("Seller", string(seller)), ("Amount", int32(amount))];
                let upsert = pb::UpsertEntityRequest {
                    table: "Sales".into(),
                    entity: Some(entity("p", &row_key, &properties)),
                    mode: pb::UpsertMode::Replace as i32,
                    ..Default::default()
                };
                client.upsert_entity(upsert).await.unwrap();
                model.insert(row_key.clone(), (seller.to_owned(), amount));
                match before {
                    Some(_) => pb::ChangeKind::Replace,
                    None => pb::ChangeKind::Insert,
                }
            }
        };
        let matched = match (matches(model.get(&row_key)), matches(before.as_ref())) {
            (true, true) => pb::ChangeMatch::Both,
            (true, false) => pb::ChangeMatch::Entity,
            (false, true) => pb::ChangeMatch::Before,
            (false, false) => continue,
        };
        expected.push((row_key, kind as i32, matched as i32));
    }
    let all = read_all(&mut client, "Sales", "").await;
    assert_eq!(all.len(), 300);
    let (shown, cursor) =
        read_filtered(&mut client, "Sales", "Seller eq 's7' and Amount gt 100").await;
    let shown: Vec<_> = shown
        .iter()
        .map(|change| (change.row_key.clone(), change.kind, change.matched))
        .collect();
    assert!(
        expected.len() > 20 && expected.len() < 250,
        "{}",
        expected.len()
    );
    assert_eq!(shown, expected);
    assert!(expected
        .iter()
        .any(|(_, kind, _)| *kind == pb::ChangeKind::Delete as i32));
    assert_eq!(
        cursor,
        all.last().unwrap().cursor,
        "the cursor moved past every record"
    );
    // No filter: no `matched`.
    assert!(all.iter().all(|change| change.matched == 0));
    // The SDK's filtered feed: the same records, each saying which image matched.
    use futures_util::TryStreamExt;
    use trestle_client::{ChangeMatch, Filter};
    let filter = Filter::eq("Seller", "s7").and(Filter::gt("Amount", 100));
    let sdk = server.sdk().await;
    let typed: Vec<_> = (sdk.table("Sales").changes().filter(filter))
        .stream::<trestle_client::Properties>()
        .try_collect()
        .await
        .unwrap();
    let matched: Vec<_> = typed.iter().map(|change| change.matched).collect();
    let wanted: Vec<_> = (expected.iter())
        .map(
            |(_, _, matched)| match pb::ChangeMatch::try_from(*matched).unwrap() {
                pb::ChangeMatch::Entity => Some(ChangeMatch::Entity),
                pb::ChangeMatch::Before => Some(ChangeMatch::Before),
                _ => Some(ChangeMatch::Both),
            },
        )
        .collect();
    assert_eq!(matched, wanted);
    let request = pb::ReadChangesRequest {
        table: "Sales".into(),
        filter: "Amount gt".into(),
        ..Default::default()
    };
    let refused = client.read_changes(request).await.map(drop);
    common::assert_error(refused, Code::InvalidArgument, "InvalidInput");
}

#[tokio::test]
async fn a_tables_settings_are_set_together_at_creation_and_after_and_a_bad_one_changes_nothing() {
    use trestle_client::{FeedSettings, IndexDefinition, TableSettings};
    let server = TestServer::start().await;
    let sdk = server.sdk().await;
    let mut client = server.client().await;
    let orders = sdk.table("Orders");
    let week = FeedSettings {
        retention_seconds: 7 * 86_400,
        before_images: true,
    };
    let created = TableSettings::new()
        .index(IndexDefinition::table("BySeller", ["Seller"]))
        .change_feed(week)
        .time_to_live(600);
    orders.create_with(created).await.unwrap();
    let described = describe(&mut client, "Orders").await;
    let settings = |table: &pb::Table| {
        (
            table.change_feed,
            table.change_feed_retention_seconds,
            table.change_feed_before_images,
            table.time_to_live,
            table.default_time_to_live_seconds,
        )
    };
    assert_eq!(settings(&described), (true, 604_800, true, true, 600));
    assert_eq!(described.indexes.len(), 1);
    assert_eq!(described.indexes[0].state, pb::IndexState::Ready as i32);
    insert(&mut client, "Orders", "s7", "o1", 1).await;
    assert_eq!(read_all(&mut client, "Orders", "").await.len(), 1);

    // Both changed in one call.
    let change = TableSettings::new()
        .no_time_to_live()
        .change_feed(FeedSettings {
            retention_seconds: 3600,
            before_images: false,
        });
    orders.set_settings(change).await.unwrap();
    let described = describe(&mut client, "Orders").await;
    assert_eq!(settings(&described), (true, 3600, false, false, 0));

    // One bad value: neither changes.
    let request = pb::SetTableSettingsRequest {
        table: "Orders".into(),
        change_feed: Some(pb::ChangeFeedSetting {
            enabled: true,
            retention_seconds: 31 * 86_400,
            before_images: true,
        }),
        time_to_live: Some(pb::TimeToLiveSetting {
            enabled: true,
            default_seconds: 60,
        }),
    };
    let refused = client.set_table_settings(request).await;
    common::assert_error(refused, Code::InvalidArgument, "InvalidInput");
    assert_eq!(
        settings(&describe(&mut client, "Orders").await),
        (true, 3600, false, false, 0)
    );
    // Named alone, the other is left as it is; indexes are not settings of a table that exists.
    let feed_off = pb::SetTableSettingsRequest {
        table: "Orders".into(),
        change_feed: Some(pb::ChangeFeedSetting::default()),
        time_to_live: None,
    };
    let answered = client
        .set_table_settings(feed_off)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(settings(&answered), (false, 0, false, false, 0));
    let with_index = TableSettings::new().index(IndexDefinition::table("ByAmount", ["Amount"]));
    let refused = orders.set_settings(with_index).await.unwrap_err();
    assert!(refused.to_string().contains("create_index"), "{refused}");
    let missing = sdk
        .table("Missing")
        .set_settings(TableSettings::new().time_to_live(0))
        .await;
    assert!(missing.unwrap_err().is_not_found());
}

#[tokio::test]
async fn segment_readers_together_read_every_record_once_each_partition_in_one_segment() {
    use futures_util::TryStreamExt;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Split", true).await;
    for n in 0..120 {
        let partition = format!("p{}", n % 17);
        insert(&mut client, "Split", &partition, &format!("r{n:03}"), n).await;
    }
    let all = read_all(&mut client, "Split", "").await;
    let sdk = server.sdk().await;
    let mut seen = Vec::new();
    let mut segment_of = std::collections::HashMap::new();
    for segment in 0..4 {
        let changes: Vec<trestle_client::Change<trestle_client::Properties>> = (sdk.table("Split"))
            .changes()
            .segment(segment, 4)
            .stream()
            .try_collect()
            .await
            .unwrap();
        let cursors: Vec<String> = changes.iter().map(|c| c.cursor.to_string()).collect();
        let mut in_order = cursors.clone();
        in_order.sort_by_key(|cursor| all.iter().position(|c| c.cursor == *cursor));
        assert_eq!(cursors, in_order, "segment {segment} in feed order");
        for change in &changes {
            let partition = change.key.partition_key.clone();
            let first = *segment_of.entry(partition.clone()).or_insert(segment);
            assert_eq!(first, segment, "{partition} in two segments");
        }
        seen.extend(cursors);
    }
    seen.sort();
    let mut every: Vec<String> = all.iter().map(|c| c.cursor.clone()).collect();
    every.sort();
    assert_eq!(seen, every, "each record in exactly one segment");
    assert!(
        segment_of
            .values()
            .collect::<std::collections::HashSet<_>>()
            .len()
            > 1
    );
    let request = pb::ReadChangesRequest {
        table: "Split".into(),
        segment: 4,
        total_segments: 4,
        ..Default::default()
    };
    let refused = client.read_changes(request).await.map(drop);
    common::assert_error(refused, Code::InvalidArgument, "InvalidInput");
}

#[tokio::test]
async fn one_reader_of_several_segments_reads_each_after_its_own_cursor() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Several", true).await;
    for n in 0..90 {
        let partition = format!("p{}", n % 13);
        insert(&mut client, "Several", &partition, &format!("r{n:03}"), n).await;
    }
    let all = read_all(&mut client, "Several", "").await;
    let segment_of = |change: &pb::Change| {
        let entity = change.entity.as_ref().unwrap();
        trestle_proto::segment::index_of(&entity.partition_key, 4)
    };
    // Segment 1 after its third record, segment 3 from the start; 0 and 2 not at all.
    let third_of_1 = all.iter().filter(|c| segment_of(c) == 1).nth(2).unwrap();
    let from = |segment: u32, cursor: &str| pb::SegmentCursor {
        segment,
        cursor: cursor.into(),
    };
    let request = |segment_cursors: Vec<pb::SegmentCursor>| pb::ReadChangesRequest {
        table: "Several".into(),
        total_segments: 4,
        segment_cursors,
        ..Default::default()
    };
    let cursors = vec![from(1, &third_of_1.cursor), from(3, "")];
    let mut stream = (client.read_changes(request(cursors)).await)
        .unwrap()
        .into_inner();
    let mut read = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        read.extend(batch.changes.into_iter().map(|c| c.cursor));
    }
    let position = |cursor: &str| all.iter().position(|c| c.cursor == cursor).unwrap();
    let after_third = position(&third_of_1.cursor);
    let expected: Vec<String> = (all.iter().enumerate())
        .filter(|(at, c)| segment_of(c) == 3 || (segment_of(c) == 1 && *at > after_third))
        .map(|(_, c)| c.cursor.clone())
        .collect();
    assert!(expected.len() > 10, "{expected:?}");
    assert_eq!(
        read, expected,
        "segments 1 and 3, each after its cursor, in feed order"
    );

    let refusals = [
        (vec![from(1, ""), from(1, "")], "twice"),
        (vec![from(4, "")], "segments of 4"),
        (vec![from(0, "x")], "is not one that ReadChanges gave"),
    ];
    for (cursors, says) in refusals {
        let refused = client.read_changes(request(cursors)).await.map(drop);
        let status = refused.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains(says), "{}", status.message());
    }
    let beside = [
        pb::ReadChangesRequest {
            segment: 2,
            ..request(vec![from(1, "")])
        },
        pb::ReadChangesRequest {
            cursor: third_of_1.cursor.clone(),
            ..request(vec![from(1, "")])
        },
        pb::ReadChangesRequest {
            from_end: true,
            ..request(vec![from(1, "")])
        },
        pb::ReadChangesRequest {
            total_segments: 0,
            ..request(vec![from(0, "")])
        },
    ];
    for refused in beside {
        let status = client.read_changes(refused).await.map(drop).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    }
}
