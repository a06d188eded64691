//! `DeleteEntities` and the SDK's `delete_range`, end to end on either store: a key range of one
//! partition deleted in commits of at most 100 with a continuation past 1,000, an optional filter,
//! never an entity changed since it was read, scoped tokens, and every refusal with its reason.

mod common;

use common::{assert_error, reason, TestServer};
use tonic::Code;
use trestle_client::{Filter, Properties, TableClient, Value};
use trestle_proto::access::{mint, Grant, KeyBounds, KeyRing, Permissions};
use trestle_proto::pb;

/// Fills partition `partition` of `table` with rows `0000`.. of `count`, every third one at
/// `Level` "debug", the rest "info".
async fn fill(table: &TableClient, partition: &str, count: u32) {
    for start in (0..count).step_by(100) {
        let mut transaction = table.transaction(partition);
        for n in start..(start + 100).min(count) {
            let level = if n % 3 == 0 { "debug" } else { "info" };
            let line = Properties::default()
                .with("Level", Value::String(level.into()))
                .with("N", Value::Int32(n as i32));
            transaction
                .insert(format!("{n:04}").as_str(), &line)
                .unwrap();
        }
        transaction.commit().await.unwrap();
    }
}

async fn count(table: &TableClient, partition: &str) -> u64 {
    table.entities().partition(partition).count().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_and_a_filter_are_deleted_and_nothing_else() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let logs = client.table("Logs");
    logs.create().await.unwrap();
    fill(&logs, "a", 1050).await;
    fill(&logs, "b", 50).await;

    let deleted = logs.delete_range("a", "0100", "0900", None).await.unwrap();
    assert_eq!(deleted, 800);
    assert_eq!(count(&logs, "a").await, 250);
    assert_eq!(count(&logs, "b").await, 50);
    assert!(logs
        .entities()
        .partition("a")
        .row_key_range("0100", "0900")
        .all()
        .await
        .unwrap()
        .is_empty());

    let debug = Filter::eq("Level", "debug");
    let deleted = logs
        .delete_range("a", "", "", Some(debug.clone()))
        .await
        .unwrap();
    let left = logs.entities().partition("a").all().await.unwrap();
    assert_eq!(deleted as usize + left.len(), 250);
    assert!(left
        .iter()
        .all(|e| e.value.get("Level") == Some(&Value::String("info".into()))));
    assert_eq!(
        logs.delete_range("a", "", "", Some(debug)).await.unwrap(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_deletes_at_most_1000_and_continues() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let logs = client.table("Big");
    logs.create().await.unwrap();
    fill(&logs, "p", 1200).await;
    let mut raw = server.client().await;
    let request = |continuation_token: String| pb::DeleteEntitiesRequest {
        table: "Big".into(),
        partition_key: Some("p".into()),
        continuation_token,
        ..Default::default()
    };
    let first = raw
        .delete_entities(request(String::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.deleted, 1000);
    assert!(!first.continuation_token.is_empty());
    let second = raw
        .delete_entities(request(first.continuation_token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.deleted, 200);
    assert!(second.continuation_token.is_empty());
    assert_eq!(count(&logs, "p").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_changed_after_it_was_read_is_never_deleted_on_a_stale_match() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let logs = client.table("Racing");
    logs.create().await.unwrap();
    fill(&logs, "p", 900).await;
    // While the debug lines are deleted, another client promotes them to "keep", noting each
    // promotion that succeeded (the line still existed).
    let promoter = {
        let logs = logs.clone();
        tokio::spawn(async move {
            let mut promoted = Vec::new();
            for n in (0..900u32).step_by(3).rev() {
                let row = format!("{n:04}");
                let keep = Properties::default().with("Level", Value::String("keep".into()));
                // Only while it exists: a merge never brings a deleted line back.
                let merged = logs
                    .merge(("p", row.as_str()), &keep, trestle_client::IfMatch::Any)
                    .await;
                if merged.is_ok() {
                    promoted.push(row);
                }
            }
            promoted
        })
    };
    // A chunk whose entities keep changing is read again; if they change every time, the call
    // answers with the conflict, and calling again goes on.
    let debug = || Some(Filter::eq("Level", "debug"));
    loop {
        match logs.delete_range("p", "", "", debug()).await {
            Ok(_) => break,
            Err(conflict) if conflict.is_precondition_failed() => continue,
            Err(other) => panic!("{other:?}"),
        }
    }
    let promoted = promoter.await.unwrap();
    // What the promoter changed after the deleter passed is deleted now, if still debug.
    logs.delete_range("p", "", "", debug()).await.unwrap();
    let left = logs.entities().partition("p").all().await.unwrap();
    let level = |row: &str| {
        left.iter()
            .find(|e| e.key.row_key == row)
            .and_then(|e| e.value.get("Level").cloned())
    };
    // Every promoted line survived (none was deleted on its stale debug match); no debug line is
    // left; every info line is untouched.
    for row in &promoted {
        assert_eq!(level(row), Some(Value::String("keep".into())), "row {row}");
    }
    assert!(left
        .iter()
        .all(|e| e.value.get("Level") != Some(&Value::String("debug".into()))));
    assert_eq!(left.len(), 600 + promoted.len());
}

#[tokio::test]
async fn bad_requests_are_refused_with_their_reason_and_tokens_bound_what_is_deleted() {
    let keys = KeyRing::generate().unwrap();
    let authenticator = trestle_server::auth::Authenticator::with_keys(keys.clone());
    let server = TestServer::start_with(|config| config.authenticator = authenticator).await;
    let admin_key = keys.signing_key().secret_text();
    let admin = trestle_client::Client::builder()
        .endpoint(server.endpoint())
        .token(admin_key.clone())
        .connect()
        .await
        .unwrap();
    let logs = admin.table("Scoped");
    logs.create().await.unwrap();
    fill(&logs, "a", 30).await;
    fill(&logs, "b", 30).await;

    let mut raw = server.client_as(&admin_key).await;
    let no_partition = raw
        .delete_entities(pb::DeleteEntitiesRequest {
            table: "Scoped".into(),
            ..Default::default()
        })
        .await;
    assert_error(no_partition, Code::InvalidArgument, "InvalidInput");
    let bad_filter = raw
        .delete_entities(pb::DeleteEntitiesRequest {
            table: "Scoped".into(),
            partition_key: Some("a".into()),
            filter: "Level eq".into(),
            ..Default::default()
        })
        .await;
    assert_error(bad_filter, Code::InvalidArgument, "InvalidInput");
    let no_table = raw
        .delete_entities(pb::DeleteEntitiesRequest {
            table: "Nowhere".into(),
            partition_key: Some("a".into()),
            ..Default::default()
        })
        .await;
    assert_error(no_table, Code::NotFound, "TableNotFound");

    // Delete without read: refused. Read and delete on rows below 0010 of partition a: only
    // those go, whatever range is asked for.
    let mut grant = Grant::new(Permissions::DELETE, 600);
    grant.table = Some("Scoped".into());
    let mut delete_only = server.client_as(&mint(keys.signing_key(), &grant)).await;
    let request = pb::DeleteEntitiesRequest {
        table: "Scoped".into(),
        partition_key: Some("a".into()),
        ..Default::default()
    };
    let refused = delete_only
        .delete_entities(request.clone())
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "AuthorizationPermissionMismatch");
    grant.permissions = Permissions::DELETE.union(Permissions::READ);
    grant.partitions = KeyBounds {
        start: Some("a".into()),
        end: Some("a\0".into()),
    };
    grant.rows = KeyBounds {
        start: None,
        end: Some("0010".into()),
    };
    let mut bounded = server.client_as(&mint(keys.signing_key(), &grant)).await;
    let deleted = bounded
        .delete_entities(request.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.deleted, 10);
    assert_eq!(count(&logs, "a").await, 20);
    let other = bounded
        .delete_entities(pb::DeleteEntitiesRequest {
            partition_key: Some("b".into()),
            ..request
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&other), "AuthorizationFailure");
    assert_eq!(count(&logs, "b").await, 30);
}
