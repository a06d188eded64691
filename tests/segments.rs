//! Scan segments (`segment`/`total_segments`) end to end, on either store: random partitions
//! compared with a model for several totals, paged and streamed, forward and reverse, with a
//! filter and as an aggregate's input; writes during a paged segment; the SDK's
//! `scan_parallel`; and every refusal, changing nothing.

mod common;

#[path = "common/rng.rs"]
mod rng;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use futures_util::TryStreamExt;
use rng::Rng;
use tonic::Code;
use trestle_proto::pb;

const T: &str = "Segmented";

/// The model: every entity's keys and its `N` (a number), in key order.
type Model = BTreeMap<(String, String), i32>;

/// Loads random partitions (random keys, 1 to 30 rows each) and returns the model.
async fn load(client: &mut RawClient, rng: &mut Rng, partitions: usize) -> Model {
    let mut model = Model::new();
    for p in 0..partitions {
        let pk = format!("{}-{p}", ["user", "Order", "zz", ""][rng.below(4)]);
        let rows = 1 + rng.below(30);
        let ops = (0..rows)
            .map(|r| {
                let n = rng.below(100) as i32;
                model.insert((pk.clone(), format!("r{r:03}")), n);
                tx_insert(entity(&pk, &format!("r{r:03}"), &[("N", int32(n))]))
            })
            .collect();
        client
            .submit_transaction(transaction(T, &pk, ops))
            .await
            .unwrap();
    }
    model
}

fn segment(index: u32, total: u32) -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: T.into(),
        segment: index,
        total_segments: total,
        ..Default::default()
    }
}

/// Checks that `segments` (each a segment's keys, in the order read) are each in `reverse` or
/// key order, hold whole partitions, are disjoint, and together are `expected`.
fn assert_split(segments: &[Vec<(String, String)>], expected: &[(String, String)], reverse: bool) {
    let mut owner: BTreeMap<&str, usize> = BTreeMap::new();
    let mut union = BTreeSet::new();
    for (index, keys) in segments.iter().enumerate() {
        let mut ordered = keys.clone();
        ordered.sort();
        if reverse {
            ordered.reverse();
        }
        assert_eq!(keys, &ordered, "segment {index} is in the query's order");
        for key in keys {
            let held = *owner.entry(&key.0).or_insert(index);
            assert_eq!(held, index, "partition {:?} split between segments", key.0);
            assert!(union.insert(key.clone()), "{key:?} in two segments");
        }
    }
    let union: Vec<_> = union.into_iter().collect();
    assert_eq!(union, expected, "the segments together are the answer");
}

#[tokio::test]
async fn segments_split_a_table_into_disjoint_whole_partitions_that_together_are_the_table() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let mut rng = Rng::new(0x5e9);
    let model = load(&mut client, &mut rng, 60).await;
    let all: Vec<_> = model.keys().cloned().collect();
    let small: Vec<_> = model
        .iter()
        .filter(|(_, n)| **n < 30)
        .map(|(key, _)| key.clone())
        .collect();
    for total in [1, 2, 3, 4, 7, 64] {
        let (mut paged, mut streamed, mut reversed, mut filtered) =
            (vec![], vec![], vec![], vec![]);
        for index in 0..total {
            let page_size = 1 + rng.below(40) as u32;
            let request = pb::QueryEntitiesRequest {
                page_size,
                ..segment(index, total)
            };
            paged.push(keys(&query_all(&mut client, request).await.0));
            streamed.push(keys(&scan_all(&mut client, segment(index, total)).await));
            let backwards = pb::QueryEntitiesRequest {
                reverse: true,
                page_size,
                ..segment(index, total)
            };
            reversed.push(keys(&query_all(&mut client, backwards).await.0));
            let matching = pb::QueryEntitiesRequest {
                filter: "N lt 30".into(),
                ..segment(index, total)
            };
            filtered.push(keys(&query_all(&mut client, matching).await.0));
        }
        assert_split(&paged, &all, false);
        assert_eq!(paged, streamed, "{total}: streamed as paged");
        assert_split(&reversed, &all, true);
        assert_split(&filtered, &small, false);
        // The segments' counts and sums add up to the table's.
        let mut count = 0;
        for index in 0..total {
            let request = pb::AggregateEntitiesRequest {
                query: Some(segment(index, total)),
                aggregations: vec![pb::Aggregation {
                    function: pb::AggregateFunction::Count as i32,
                    ..Default::default()
                }],
                ..Default::default()
            };
            let groups = client
                .aggregate_entities(request)
                .await
                .unwrap()
                .into_inner();
            count += groups.groups.iter().map(|g| g.entities).sum::<u64>();
        }
        assert_eq!(count, model.len() as u64, "{total}: counted once each");
    }
}

#[tokio::test]
async fn a_paged_segment_read_while_writes_go_on_returns_each_lasting_row_once_and_no_other() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let mut rng = Rng::new(0xfeed);
    let model = load(&mut client, &mut rng, 40).await;
    let (index, total) = (1, 4);
    let mut request = pb::QueryEntitiesRequest {
        page_size: 7,
        ..segment(index, total)
    };
    let partitions: Vec<String> = model.keys().map(|k| k.0.clone()).collect();
    let (mut seen, mut added, mut removed) = (Vec::new(), BTreeSet::new(), BTreeSet::new());
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        seen.extend(keys(&page.entities));
        // Between pages: a new row in some partition, and a row deleted from another.
        let pk = &partitions[rng.below(partitions.len())];
        let rk = format!("new{}", added.len());
        client
            .insert_entity(insert_request(T, entity(pk, &rk, &[("N", int32(1))])))
            .await
            .unwrap();
        added.insert((pk.clone(), rk));
        let victim = model.keys().nth(rng.below(model.len())).unwrap();
        if removed.insert(victim.clone()) {
            let delete = pb::DeleteEntityRequest {
                idempotency_key: String::new(),
                table: T.into(),
                partition_key: victim.0.clone(),
                row_key: victim.1.clone(),
                if_match: "*".into(),
            };
            client.delete_entity(delete).await.unwrap();
        }
        if page.continuation_token.is_empty() {
            break;
        }
        request.continuation_token = page.continuation_token;
    }
    let mut ordered = seen.clone();
    ordered.sort();
    ordered.dedup();
    assert_eq!(seen, ordered, "in key order, each row once");
    let holds = |pk: &str| pb::QueryEntitiesRequest {
        partition_key: Some(pk.into()),
        ..segment(index, total)
    };
    for key in model.keys().filter(|key| !removed.contains(*key)) {
        let in_segment = !query_all(&mut client, holds(&key.0)).await.0.is_empty();
        assert_eq!(
            seen.contains(key),
            in_segment,
            "{key:?}: read iff its partition is here"
        );
    }
    for key in &seen {
        assert!(
            model.contains_key(key) || added.contains(key),
            "{key:?} was never written"
        );
    }
}

#[tokio::test]
async fn the_sdk_reads_a_table_as_parallel_segments() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let model = load(&mut client, &mut Rng::new(7), 30).await;
    let sdk = server.sdk().await;
    let table = sdk.table(T);
    let segments = table.scan_parallel::<trestle_client::Properties>(4);
    assert_eq!(segments.len(), 4);
    let read = futures_util::future::try_join_all(segments.into_iter().map(|segment| {
        segment
            .map_ok(|e| (e.key.partition_key, e.key.row_key))
            .try_collect::<Vec<_>>()
    }))
    .await
    .unwrap();
    let all: Vec<_> = model.keys().cloned().collect();
    assert_split(&read, &all, false);
}

#[tokio::test]
async fn a_segment_outside_its_total_or_a_token_of_another_segment_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    load(&mut client, &mut Rng::new(3), 20).await;
    for (index, total, says) in [
        (1, 0, "segment needs total_segments"),
        (4, 4, "numbered 0 to 3"),
        (0, 1025, "at most 1024"),
    ] {
        let refused = client.query_entities(segment(index, total)).await;
        let status = assert_error(refused, Code::InvalidArgument, "InvalidInput");
        assert!(status.message().contains(says), "{status:?}");
        let refused = client.scan_entities(segment(index, total)).await;
        let status = assert_error(refused, Code::InvalidArgument, "InvalidInput");
        assert!(status.message().contains(says), "{status:?}");
    }
    let first = pb::QueryEntitiesRequest {
        page_size: 1,
        ..segment(0, 2)
    };
    let page = client.query_entities(first).await.unwrap().into_inner();
    assert!(!page.continuation_token.is_empty());
    let other = pb::QueryEntitiesRequest {
        continuation_token: page.continuation_token,
        ..segment(1, 2)
    };
    let refused = client.query_entities(other).await;
    let status = assert_error(refused, Code::InvalidArgument, "InvalidInput");
    assert!(
        status.message().contains("continuation token"),
        "{status:?}"
    );
}
