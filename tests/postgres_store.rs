//! Trestle servers over one PostgreSQL database are one service: what one writes the other reads,
//! a continuation token from one resumes on the other, an ETag from one conditions a write on the
//! other, and a table one deletes is gone for both. Each test starts its own throwaway cluster
//! (skipped where PostgreSQL is not installed, unless `TRESTLE_REQUIRE_POSTGRES` is set).

mod common;

use common::postgres::Postgres;
use common::{assert_error, fill_partition, get_request, TestServer};
use tonic::Code;
use trestle_proto::pb;
use trestle_server::config::DatabaseStore;

/// A server keeping its store in the database at `url`.
async fn server_over(url: &str) -> TestServer {
    let database = DatabaseStore {
        url: url.to_owned(),
        pool_size: 4,
    };
    TestServer::start_with(move |config| config.database = Some(database)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_database_are_one_service() {
    // The cluster's programs and its admin connection block: off the runtime.
    let Some((cluster, url)) = tokio::task::spawn_blocking(|| {
        let cluster = Postgres::start()?;
        let url = cluster.database("shared");
        Some((cluster, url))
    })
    .await
    .unwrap() else {
        return;
    };
    let (first, second) = (server_over(&url).await, server_over(&url).await);
    let mut one = first.client_with_table("Shared").await;
    let mut other = second.client().await;
    let same_name = pb::CreateTableRequest {
        table: "shared".into(),
    };
    let twice = other.create_table(same_name).await;
    assert_error(twice, Code::AlreadyExists, "TableAlreadyExists");
    fill_partition(&mut one, "Shared", "p", 30).await;
    let read = other
        .get_entity(get_request("Shared", "p", "000007"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.row_key, "000007");

    // A continuation token from one server resumes on the other.
    let mut request = pb::QueryEntitiesRequest {
        table: "Shared".into(),
        page_size: 10,
        ..Default::default()
    };
    let mut seen = Vec::new();
    for turn in 0..3 {
        let client = if turn == 1 { &mut other } else { &mut one };
        let page = client
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.entities.into_iter().map(|e| e.row_key));
        request.continuation_token = page.continuation_token;
    }
    assert_eq!(seen.len(), 30);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "in key order, once each"
    );

    // A partition of more rows than the store reads with one statement, forward and reverse.
    fill_partition(&mut one, "Shared", "big", 600).await;
    for reverse in [false, true] {
        let whole = pb::QueryEntitiesRequest {
            table: "Shared".into(),
            partition_key: Some("big".into()),
            reverse,
            ..Default::default()
        };
        let rows: Vec<String> = other
            .query_entities(whole)
            .await
            .unwrap()
            .into_inner()
            .entities
            .into_iter()
            .map(|e| e.row_key)
            .collect();
        assert_eq!(rows.len(), 600, "reverse: {reverse}");
        let ordered = rows.windows(2).all(|w| (w[0] < w[1]) != reverse);
        assert!(ordered, "reverse: {reverse}");
    }

    // An ETag read on one server conditions a write on the other.
    let mut changed = read.clone();
    changed.etag.clear();
    changed.timestamp = None;
    let update = |if_match: &str| pb::UpdateEntityRequest {
        table: "Shared".into(),
        entity: Some(changed.clone()),
        if_match: if_match.into(),
        ..Default::default()
    };
    one.update_entity(update(&read.etag)).await.unwrap();
    assert_error(
        other.update_entity(update(&read.etag)).await,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    );

    // A table deleted through one server is gone for both.
    let deletion = pb::DeleteTableRequest {
        table: "Shared".into(),
    };
    other.delete_table(deletion).await.unwrap();
    let gone = one.get_entity(get_request("Shared", "p", "000007")).await;
    assert_error(gone, Code::NotFound, "TableNotFound");
    drop((first, second));
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}
