//! Time to live end to end (both stores): an entity past its own `TimeToLive` or the table's
//! default is invisible at once to every read and missing to every write; the server removes it
//! in the background with an EXPIRE record in the feed; each write starts the count again;
//! invalid lifetimes and settings are refused.

mod common;

use std::time::{Duration, Instant};

use common::{entity, get_request, insert_request, int32, int64, string, TestServer};
use tonic::Code;
use trestle_proto::pb;

type Client = common::RawClient;

async fn create(client: &mut Client, table: &str, default_seconds: u64) {
    client
        .create_table(pb::CreateTableRequest {
            table: table.into(),
            change_feed: true,
            time_to_live: true,
            default_time_to_live_seconds: default_seconds,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Inserts `rk` into partition `p` of `table`, with `TimeToLive` = `ttl` if given.
async fn put(client: &mut Client, table: &str, rk: &str, ttl: Option<pb::Value>) -> pb::Entity {
    let mut properties = vec![("N", int32(1))];
    if let Some(ttl) = ttl {
        properties.push(("TimeToLive", ttl));
    }
    client
        .insert_entity(insert_request(table, entity("p", rk, &properties)))
        .await
        .unwrap()
        .into_inner()
}

/// The row keys a query of `table` returns, and its count.
async fn visible(client: &mut Client, table: &str) -> (Vec<String>, u64) {
    let query = pb::QueryEntitiesRequest {
        table: table.into(),
        ..Default::default()
    };
    let page = client
        .query_entities(query.clone())
        .await
        .unwrap()
        .into_inner();
    let count = client
        .count_entities(query)
        .await
        .unwrap()
        .into_inner()
        .count;
    (
        page.entities.into_iter().map(|e| e.row_key).collect(),
        count,
    )
}

/// Every change kind and row key of `table`'s feed.
async fn feed(client: &mut Client, table: &str) -> Vec<(pb::ChangeKind, String)> {
    let request = pb::ReadChangesRequest {
        table: table.into(),
        ..Default::default()
    };
    let mut stream = client.read_changes(request).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        for change in batch.changes {
            seen.push((
                pb::ChangeKind::try_from(change.kind).unwrap(),
                change.row_key,
            ));
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_entity_is_gone_for_every_read_and_write_then_removed_with_a_record() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Sessions", 0).await;
    let described = client
        .get_table(pb::GetTableRequest {
            table: "Sessions".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(described.time_to_live);
    assert_eq!(described.default_time_to_live_seconds, 0);
    put(&mut client, "Sessions", "brief", Some(int32(1))).await;
    put(&mut client, "Sessions", "kept", None).await;
    put(&mut client, "Sessions", "forever", Some(int64(-1))).await;
    // Refreshed: each write starts the count again.
    put(&mut client, "Sessions", "renewed", Some(int32(2))).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    client
        .merge_entity(pb::MergeEntityRequest {
            table: "Sessions".into(),
            entity: Some(entity("p", "renewed", &[("N", int32(2))])),
            if_match: "*".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let gone = client
        .get_entity(get_request("Sessions", "p", "brief"))
        .await;
    common::assert_error(gone, Code::NotFound, "ResourceNotFound");
    let (rows, count) = visible(&mut client, "Sessions").await;
    assert_eq!(rows, ["forever", "kept", "renewed"]);
    assert_eq!(count, 3);
    let many = client
        .get_entities(pb::GetEntitiesRequest {
            keys: ["brief", "kept"]
                .iter()
                .map(|rk| pb::EntityRef {
                    table: "Sessions".into(),
                    partition_key: "p".into(),
                    row_key: (*rk).into(),
                })
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let found: Vec<bool> = many.entities.iter().map(|r| r.entity.is_some()).collect();
    assert_eq!(found, [false, true]);
    // Missing to writes: an update finds nothing, an insert on its key succeeds.
    let update = client
        .update_entity(pb::UpdateEntityRequest {
            table: "Sessions".into(),
            entity: Some(entity("p", "brief", &[("N", int32(5))])),
            if_match: "*".into(),
            ..Default::default()
        })
        .await;
    common::assert_error(update, Code::NotFound, "ResourceNotFound");

    // The server removes it, with an EXPIRE record.
    let started = Instant::now();
    while !feed(&mut client, "Sessions")
        .await
        .contains(&(pb::ChangeKind::Expire, "brief".into()))
    {
        assert!(started.elapsed() < Duration::from_secs(20), "never removed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = put(&mut client, "Sessions", "brief", None).await;
    let read = client
        .get_entity(get_request("Sessions", "p", "brief"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.etag, again.etag);
    let (rows, _) = visible(&mut client, "Sessions").await;
    assert_eq!(rows, ["brief", "forever", "kept", "renewed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_applies_to_entities_without_their_own_and_an_insert_replaces_an_expired_one() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Cache", 1).await;
    put(&mut client, "Cache", "default", None).await;
    put(&mut client, "Cache", "forever", Some(int32(-1))).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (rows, count) = visible(&mut client, "Cache").await;
    assert_eq!((rows, count), (vec!["forever".to_owned()], 1));
    // Inserted over the expired entity before the server removes it.
    let fresh = put(&mut client, "Cache", "default", Some(int32(3600))).await;
    let read = client
        .get_entity(get_request("Cache", "p", "default"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.etag, fresh.etag);
}

#[tokio::test]
async fn bad_lifetimes_and_settings_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create(&mut client, "Strict", 0).await;
    for bad in [int32(0), int32(-2), string("60"), int64(315_360_001)] {
        let refused = client
            .insert_entity(insert_request(
                "Strict",
                entity("p", "r", &[("TimeToLive", bad)]),
            ))
            .await;
        common::assert_error(refused, Code::InvalidArgument, "InvalidInput");
    }
    assert_eq!(visible(&mut client, "Strict").await.1, 0);
    let too_long = client
        .create_table(pb::CreateTableRequest {
            table: "Never".into(),
            time_to_live: true,
            default_time_to_live_seconds: 315_360_001,
            ..Default::default()
        })
        .await;
    common::assert_error(too_long, Code::InvalidArgument, "InvalidInput");
    let missing = client
        .get_table(pb::GetTableRequest {
            table: "Never".into(),
        })
        .await;
    common::assert_error(missing, Code::NotFound, "TableNotFound");
    // A table without a time to live: TimeToLive is an ordinary property.
    client
        .create_table(pb::CreateTableRequest {
            table: "Plain".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    client
        .insert_entity(insert_request(
            "Plain",
            entity("p", "r", &[("TimeToLive", string("whatever"))]),
        ))
        .await
        .unwrap();
    // Turned off, nothing expires.
    client
        .set_time_to_live(pb::SetTimeToLiveRequest {
            table: "Strict".into(),
            enabled: false,
            default_seconds: 0,
        })
        .await
        .unwrap();
    client
        .insert_entity(insert_request(
            "Strict",
            entity("p", "r", &[("TimeToLive", string("whatever"))]),
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_sdk_turns_expiry_on_and_sees_an_expire_kind() {
    let server = TestServer::start().await;
    let table = server.sdk().await.table("Tokens");
    table.create().await.unwrap();
    table.set_time_to_live(true, 1).await.unwrap();
    let settings = trestle_client::FeedSettings {
        retention_seconds: 0,
        before_images: true,
    };
    table.keep_change_feed(settings).await.unwrap();
    let refused = table.set_time_to_live(true, 315_360_001).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(trestle_client::ErrorCode::InvalidInput)
    );
    let mut client = server.client().await;
    let described = client
        .get_table(pb::GetTableRequest {
            table: "Tokens".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(described.time_to_live);
    assert_eq!(described.default_time_to_live_seconds, 1);
    let stored = put(&mut client, "Tokens", "t1", None).await;
    let started = Instant::now();
    loop {
        use futures_util::TryStreamExt;
        let changes: Vec<_> = table
            .changes()
            .stream::<trestle_client::Properties>()
            .try_collect()
            .await
            .unwrap();
        if let Some(expired) = changes
            .iter()
            .find(|c| c.kind == trestle_client::ChangeKind::Expire)
        {
            assert_eq!(expired.key.row_key, "t1");
            assert!(expired.entity.is_none());
            let before = expired.before.as_ref().expect("the entity that expired");
            assert_eq!(before.etag.as_str(), stored.etag, "as it was stored");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
