//! Range, prefix and reverse scans, paging with continuation tokens, and token validation.

mod common;

use common::*;
use tonic::Code;
use trestle_proto::pb;

const T: &str = "Logs";

/// Loads `partitions` partitions of `rows` rows each, row keys `r0000`…, in transactions of 100.
async fn load(client: &mut RawClient, partitions: usize, rows: usize) -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for p in 0..partitions {
        let pk = format!("part-{p}");
        let all: Vec<_> = (0..rows).map(|r| format!("r{r:04}")).collect();
        for chunk in all.chunks(100) {
            let ops = chunk
                .iter()
                .map(|rk| tx_insert(entity(&pk, rk, &[("N", string(rk))])))
                .collect();
            client
                .submit_transaction(transaction(T, &pk, ops))
                .await
                .unwrap();
        }
        keys.extend(all.into_iter().map(|rk| (pk.clone(), rk)));
    }
    keys
}

fn query() -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: T.into(),
        ..Default::default()
    }
}

fn in_partition(pk: &str) -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        partition_key: Some(pk.into()),
        ..query()
    }
}

#[tokio::test]
async fn paging_across_2500_rows_and_partitions_returns_everything_in_order() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let expected = load(&mut client, 5, 500).await;
    for page_size in [1000, 7] {
        let (entities, pages) = query_all(
            &mut client,
            pb::QueryEntitiesRequest {
                page_size,
                ..query()
            },
        )
        .await;
        assert_eq!(keys(&entities), expected, "page size {page_size}");
        assert_eq!(
            pages.len(),
            2500usize.div_ceil(page_size as usize),
            "no trailing empty page"
        );
        assert!(pages
            .iter()
            .all(|n| *n == page_size as usize || *n == 2500 % page_size as usize));
        let (reversed, _) = query_all(
            &mut client,
            pb::QueryEntitiesRequest {
                page_size,
                reverse: true,
                ..query()
            },
        )
        .await;
        let mut expected_reversed = expected.clone();
        expected_reversed.reverse();
        assert_eq!(
            keys(&reversed),
            expected_reversed,
            "reverse, page size {page_size}"
        );
    }
    let (one_partition, pages) = query_all(
        &mut client,
        pb::QueryEntitiesRequest {
            page_size: 100,
            ..in_partition("part-3")
        },
    )
    .await;
    assert_eq!(keys(&one_partition), expected[1500..2000]);
    assert_eq!(pages, vec![100; 5]);
}

/// A page whose filter examines thousands of rows of one partition reads them in several
/// batches from the store (the PostgreSQL store fetches 256 rows at a time): no row at a batch's
/// edge is skipped or seen twice, forward or reverse.
#[tokio::test]
async fn a_filter_examining_thousands_of_rows_misses_none_at_the_batches_edges() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let all = load(&mut client, 1, 3000).await;
    let wanted = [0, 255, 256, 511, 512, 2047, 2048, 2999];
    let filter = wanted
        .iter()
        .map(|r| format!("N eq 'r{r:04}'"))
        .collect::<Vec<_>>()
        .join(" or ");
    let mut expected: Vec<_> = wanted.iter().map(|r| all[*r].clone()).collect();
    for reverse in [false, true] {
        let request = pb::QueryEntitiesRequest {
            filter: filter.clone(),
            reverse,
            ..in_partition("part-0")
        };
        let (found, _) = query_all(&mut client, request).await;
        assert_eq!(keys(&found), expected, "reverse: {reverse}");
        expected.reverse();
    }
}

#[tokio::test]
async fn prefix_and_range_scans_cover_exactly_their_keys() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for rk in [
        "exp1",
        "exp1_item1",
        "exp1_item2",
        "exp2",
        "exp2_item1",
        "exq",
        "ex",
    ] {
        client
            .insert_entity(insert_request(T, entity("alice", rk, &[])))
            .await
            .unwrap();
    }
    client
        .insert_entity(insert_request(T, entity("alicea", "exp1_x", &[])))
        .await
        .unwrap();
    let rows = |entities: &[pb::Entity]| {
        entities
            .iter()
            .map(|e| e.row_key.clone())
            .collect::<Vec<_>>()
    };

    let prefix = pb::QueryEntitiesRequest {
        row_key_prefix: "exp1".into(),
        ..in_partition("alice")
    };
    let (found, _) = query_all(&mut client, prefix.clone()).await;
    assert_eq!(rows(&found), ["exp1", "exp1_item1", "exp1_item2"]);
    let (found, _) = query_all(
        &mut client,
        pb::QueryEntitiesRequest {
            reverse: true,
            ..prefix
        },
    )
    .await;
    assert_eq!(rows(&found), ["exp1_item2", "exp1_item1", "exp1"]);

    let range = pb::QueryEntitiesRequest {
        row_key_start: "exp1_item2".into(),
        row_key_end: "exq".into(),
        ..in_partition("alice")
    };
    let (found, _) = query_all(&mut client, range.clone()).await;
    assert_eq!(rows(&found), ["exp1_item2", "exp2", "exp2_item1"]);
    let (found, _) = query_all(
        &mut client,
        pb::QueryEntitiesRequest {
            reverse: true,
            page_size: 1,
            ..range
        },
    )
    .await;
    assert_eq!(rows(&found), ["exp2_item1", "exp2", "exp1_item2"]);

    let open_end = pb::QueryEntitiesRequest {
        row_key_start: "exq".into(),
        ..in_partition("alice")
    };
    assert_eq!(rows(&query_all(&mut client, open_end).await.0), ["exq"]);
    let crossed = pb::QueryEntitiesRequest {
        row_key_start: "z".into(),
        row_key_end: "a".into(),
        ..in_partition("alice")
    };
    assert!(query_all(&mut client, crossed).await.0.is_empty());
    let empty_partition = in_partition("nobody");
    assert!(query_all(&mut client, empty_partition).await.0.is_empty());
}

#[tokio::test]
async fn reverse_scans_serve_log_tail_keys_newest_first() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for seq in 0..50 {
        client
            .insert_entity(insert_request(
                T,
                entity("device-1", &format!("{seq:010}"), &[]),
            ))
            .await
            .unwrap();
    }
    let newest = pb::QueryEntitiesRequest {
        reverse: true,
        page_size: 3,
        ..in_partition("device-1")
    };
    let page = client.query_entities(newest).await.unwrap().into_inner();
    let rows: Vec<_> = page.entities.iter().map(|e| e.row_key.as_str()).collect();
    assert_eq!(rows, ["0000000049", "0000000048", "0000000047"]);
}

#[tokio::test]
async fn query_projects_selected_properties() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(
            T,
            entity("p", "r", &[("A", int32(1)), ("B", int32(2))]),
        ))
        .await
        .unwrap();
    let request = pb::QueryEntitiesRequest {
        select: vec!["A".into()],
        ..query()
    };
    let page = client.query_entities(request).await.unwrap().into_inner();
    assert_eq!(
        page.entities[0].properties.keys().collect::<Vec<_>>(),
        ["A"]
    );
    let request = pb::QueryEntitiesRequest {
        select: vec!["A".into(), "A".into()],
        ..query()
    };
    assert_error(
        client.query_entities(request).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
}

#[tokio::test]
async fn conflicting_key_fields_are_refused() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let cases = [
        pb::QueryEntitiesRequest {
            row_key_prefix: "a".into(),
            ..query()
        },
        pb::QueryEntitiesRequest {
            row_key_start: "a".into(),
            ..query()
        },
        pb::QueryEntitiesRequest {
            row_key_prefix: "a".into(),
            row_key_end: "b".into(),
            ..in_partition("p")
        },
        pb::QueryEntitiesRequest {
            row_key_prefix: "a/b".into(),
            ..in_partition("p")
        },
    ];
    for request in cases {
        assert_error(
            client.query_entities(request).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
    }
}

#[tokio::test]
async fn garbage_and_foreign_continuation_tokens_are_refused() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    load(&mut client, 2, 20).await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Other".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let ops = (0..20)
        .map(|i| tx_insert(entity("part-0", &format!("r{i:04}"), &[])))
        .collect();
    client
        .submit_transaction(transaction("Other", "part-0", ops))
        .await
        .unwrap();

    let first = client
        .query_entities(pb::QueryEntitiesRequest {
            page_size: 5,
            ..query()
        })
        .await
        .unwrap()
        .into_inner();
    let token = first.continuation_token;
    assert!(!token.is_empty());
    let with_token = |request: pb::QueryEntitiesRequest, token: &str| pb::QueryEntitiesRequest {
        continuation_token: token.into(),
        ..request
    };

    for garbage in [
        "garbage!",
        "AAAA",
        "bm90IGEgdG9rZW4",
        &token[..token.len() - 2],
    ] {
        let status = assert_error(
            client.query_entities(with_token(query(), garbage)).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
        assert!(
            status.message().contains("continuation token"),
            "{}",
            status.message()
        );
    }
    let other_table = pb::QueryEntitiesRequest {
        table: "Other".into(),
        ..query()
    };
    let status = assert_error(
        client.query_entities(with_token(other_table, &token)).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert!(
        status.message().contains("another table"),
        "{}",
        status.message()
    );
    let other_shape = pb::QueryEntitiesRequest {
        reverse: true,
        ..query()
    };
    assert_error(
        client.query_entities(with_token(other_shape, &token)).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    let other_partition = in_partition("part-1");
    assert_error(
        client
            .query_entities(with_token(other_partition, &token))
            .await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    // The genuine token still works, with another page size.
    let next = client
        .query_entities(pb::QueryEntitiesRequest {
            page_size: 100,
            ..with_token(query(), &token)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.entities.len(), 35);
}

#[tokio::test]
async fn a_token_from_a_deleted_and_recreated_table_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    load(&mut client, 1, 10).await;
    let token = client
        .query_entities(pb::QueryEntitiesRequest {
            page_size: 2,
            ..query()
        })
        .await
        .unwrap()
        .into_inner()
        .continuation_token;
    client
        .delete_table(pb::DeleteTableRequest { table: T.into() })
        .await
        .unwrap();
    create_when_reclaimed(&mut client, T).await;
    let request = pb::QueryEntitiesRequest {
        continuation_token: token,
        ..query()
    };
    assert_error(
        client.query_entities(request).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
}

#[tokio::test]
async fn pages_of_large_entities_stay_under_the_message_limit() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for i in 0..12 {
        let props: Vec<(String, pb::Value)> = (0..8)
            .map(|b| (format!("B{b}"), binary(vec![b as u8; 60_000])))
            .collect();
        let refs: Vec<(&str, pb::Value)> =
            props.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        client
            .insert_entity(insert_request(T, entity("big", &format!("{i:02}"), &refs)))
            .await
            .unwrap();
    }
    let (entities, pages) = query_all(&mut client, query()).await;
    assert_eq!(entities.len(), 12);
    assert!(
        pages.len() > 1,
        "a page stops at the byte budget: {pages:?}"
    );
}

/// Entities whose wire form is much larger than their stored form (GUIDs are 16 bytes stored, 36
/// characters sent; negative Int32s 4 bytes stored, 10 sent): pages and streamed batches are
/// bounded by what they send, so they still fit the client's default 4 MiB message limit.
#[tokio::test]
async fn pages_are_bounded_by_their_encoded_size() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let guid = pb::Value {
        kind: Some(pb::value::Kind::GuidValue(
            "a455c695-df98-5678-aaaa-81d3367e5a34".into(),
        )),
    };
    let names: Vec<String> = (0..250).map(|i| format!("P{i}")).collect();
    let properties: Vec<(&str, pb::Value)> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let value = if i % 2 == 0 { guid.clone() } else { int32(-1) };
            (name.as_str(), value)
        })
        .collect();
    let rows: Vec<String> = (0..500).map(|r| format!("r{r:04}")).collect();
    for chunk in rows.chunks(100) {
        let ops = chunk
            .iter()
            .map(|rk| tx_insert(entity("wide", rk, &properties)))
            .collect();
        client
            .submit_transaction(transaction(T, "wide", ops))
            .await
            .unwrap();
    }
    let (entities, pages) = query_all(&mut client, query()).await;
    assert_eq!(entities.len(), 500);
    assert!(pages.len() > 1, "pages stop at the byte budget: {pages:?}");

    let mut stream = client.scan_entities(query()).await.unwrap().into_inner();
    let mut streamed = 0;
    while let Some(batch) = stream.message().await.unwrap() {
        streamed += batch.entities.len();
    }
    assert_eq!(streamed, 500);
}
