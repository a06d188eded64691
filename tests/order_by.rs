//! `order_by` on `QueryEntities` and `ScanEntities` end to end, on either store: random entities
//! (a property of mixed types or missing, a path into a document, ties) compared with a model for
//! random orderings, page sizes and filters, paged and streamed; inserts between the pages of a
//! sorted query; an index whose order is the ordering serving it unsorted; the SDK's `order_by`;
//! and every refusal, changing nothing.

mod common;

#[path = "common/rng.rs"]
mod rng;

use std::cmp::Ordering;

use common::*;
use rng::Rng;
use tonic::Code;
use trestle_proto::pb;

const T: &str = "Sorted";

/// A value of `V` as the model keeps it.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Double(f64),
    Int32(i32),
    Int64(i64),
    Text(String),
}

impl V {
    /// The rank of its EDM type in index order (Double, Int32, Int64, String).
    fn rank(&self) -> u8 {
        match self {
            V::Double(_) => 0,
            V::Int32(_) => 1,
            V::Int64(_) => 2,
            V::Text(_) => 3,
        }
    }

    fn cmp(&self, other: &V) -> Ordering {
        match (self, other) {
            (V::Double(a), V::Double(b)) => a.total_cmp(b),
            (V::Int32(a), V::Int32(b)) => a.cmp(b),
            (V::Int64(a), V::Int64(b)) => a.cmp(b),
            (V::Text(a), V::Text(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }

    fn value(&self) -> pb::Value {
        use pb::value::Kind;
        let kind = match self {
            V::Double(v) => Kind::DoubleValue(*v),
            V::Int32(v) => Kind::Int32Value(*v),
            V::Int64(v) => Kind::Int64Value(*v),
            V::Text(v) => Kind::StringValue(v.clone()),
        };
        pb::Value { kind: Some(kind) }
    }
}

/// One entity of the model.
#[derive(Debug, Clone)]
struct Row {
    pk: String,
    rk: String,
    v: Option<V>,
    /// `D/X`: a number inside a document, or no document.
    x: Option<i32>,
}

fn random_v(rng: &mut Rng) -> Option<V> {
    match rng.below(6) {
        0 => None,
        1 => Some(V::Double(rng.below(7) as f64 - 3.5)),
        2 => Some(V::Int64(rng.below(5) as i64 - 2)),
        3 => Some(V::Text(["", "a", "ab", "b"][rng.below(4)].into())),
        _ => Some(V::Int32(rng.below(9) as i32 - 4)),
    }
}

fn pb_entity(row: &Row) -> pb::Entity {
    let mut properties = vec![];
    if let Some(v) = &row.v {
        properties.push(("V", v.value()));
    }
    let mut entity = entity(&row.pk, &row.rk, &properties);
    if let Some(x) = row.x {
        let document = pb::ObjectValue {
            members: [("X".to_owned(), int32(x))].into(),
        };
        entity.properties.insert(
            "D".into(),
            pb::Value {
                kind: Some(pb::value::Kind::ObjectValue(document)),
            },
        );
    }
    entity
}

/// Loads `count` random rows over a few partitions, in transactions of one partition.
async fn load(client: &mut RawClient, rng: &mut Rng, count: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    for n in 0..count {
        rows.push(Row {
            pk: format!("p{}", rng.below(4)),
            rk: format!("r{n:04}"),
            v: random_v(rng),
            x: (rng.below(4) > 0).then(|| rng.below(5) as i32),
        });
    }
    for pk in ["p0", "p1", "p2", "p3"] {
        let mine: Vec<_> = rows.iter().filter(|row| row.pk == pk).collect();
        for chunk in mine.chunks(100) {
            let ops = chunk.iter().map(|row| tx_insert(pb_entity(row))).collect();
            client
                .submit_transaction(transaction(T, pk, ops))
                .await
                .unwrap();
        }
    }
    rows
}

/// One term of an ordering as the test asks it.
#[derive(Debug, Clone, Copy)]
enum Term {
    V,
    X,
    RowKey,
}

impl Term {
    fn path(self) -> &'static str {
        match self {
            Term::V => "V",
            Term::X => "D/X",
            Term::RowKey => "RowKey",
        }
    }

    /// The model's order of two rows by this term, ascending (missing first).
    fn cmp(self, a: &Row, b: &Row) -> Ordering {
        match self {
            Term::V => match (&a.v, &b.v) {
                (Some(a), Some(b)) => a.cmp(b),
                (a, b) => a.is_some().cmp(&b.is_some()),
            },
            Term::X => a.x.cmp(&b.x),
            Term::RowKey => a.rk.cmp(&b.rk),
        }
    }
}

fn model_order(rows: &[Row], terms: &[(Term, bool)]) -> Vec<(String, String)> {
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by(|a, b| {
        for (term, descending) in terms {
            let order = term.cmp(a, b);
            let order = if *descending { order.reverse() } else { order };
            if order != Ordering::Equal {
                return order;
            }
        }
        (&a.pk, &a.rk).cmp(&(&b.pk, &b.rk))
    });
    sorted
        .into_iter()
        .map(|row| (row.pk.clone(), row.rk.clone()))
        .collect()
}

fn sorted_query(terms: &[(Term, bool)]) -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: T.into(),
        order_by: terms
            .iter()
            .map(|(term, descending)| pb::OrderTerm {
                path: term.path().into(),
                descending: *descending,
            })
            .collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn sorted_pages_match_the_model_for_random_orderings_page_sizes_and_filters() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let mut rng = Rng::new(0x50f7);
    let rows = load(&mut client, &mut rng, 400).await;
    let choices = [Term::V, Term::X, Term::RowKey];
    for round in 0..24 {
        let count = 1 + rng.below(2);
        let terms: Vec<(Term, bool)> = (0..count)
            .map(|_| (choices[rng.below(3)], rng.below(2) == 1))
            .collect();
        let page_size = [1, 7, 50, 1000][rng.below(4)];
        let (partition, filtered) = match round % 3 {
            0 => (None, rows.clone()),
            1 => (
                Some("p1".to_owned()),
                rows.iter().filter(|r| r.pk == "p1").cloned().collect(),
            ),
            _ => (
                None,
                rows.iter().filter(|r| r.x == Some(2)).cloned().collect(),
            ),
        };
        let request = pb::QueryEntitiesRequest {
            page_size,
            partition_key: partition,
            filter: if round % 3 == 2 {
                "D/X eq 2".into()
            } else {
                String::new()
            },
            select: vec!["V".into()],
            ..sorted_query(&terms)
        };
        let (entities, pages) = query_all(&mut client, request).await;
        assert_eq!(
            keys(&entities),
            model_order(&filtered, &terms),
            "round {round}: {terms:?}, pages of {page_size}"
        );
        assert!(pages.iter().all(|n| *n <= page_size as usize));
        assert!(
            entities.iter().all(|e| !e.properties.contains_key("D")),
            "the selection applies"
        );
    }
}

#[tokio::test]
async fn a_sorted_query_paged_while_inserts_go_on_returns_each_first_entity_once_in_order() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let mut rng = Rng::new(11);
    let rows = load(&mut client, &mut rng, 120).await;
    let terms = [(Term::V, true)];
    let mut request = pb::QueryEntitiesRequest {
        page_size: 9,
        ..sorted_query(&terms)
    };
    let mut seen = Vec::new();
    let mut inserted = 0;
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        seen.extend(keys(&page.entities));
        let row = Row {
            pk: "p9".into(),
            rk: format!("late{inserted}"),
            v: random_v(&mut rng),
            x: None,
        };
        client
            .insert_entity(insert_request(T, pb_entity(&row)))
            .await
            .unwrap();
        inserted += 1;
        if page.continuation_token.is_empty() {
            break;
        }
        request.continuation_token = page.continuation_token;
    }
    let expected: Vec<_> = model_order(&rows, &terms);
    let first: Vec<_> = seen.iter().filter(|k| k.0 != "p9").cloned().collect();
    assert_eq!(
        first, expected,
        "every entity there from the start once, in order"
    );
}

#[tokio::test]
async fn sorted_streams_match_the_model_and_resume_from_a_page_token() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let mut rng = Rng::new(0x5c4e);
    let rows = load(&mut client, &mut rng, 300).await;
    let choices = [Term::V, Term::X, Term::RowKey];
    for round in 0..8 {
        let terms: Vec<(Term, bool)> = (0..1 + rng.below(2))
            .map(|_| (choices[rng.below(3)], rng.below(2) == 1))
            .collect();
        // Batches of at most `page_size`: a small one streams in many sorted passes.
        let page_size = [0, 13, 64][rng.below(3)];
        let filtered: Vec<Row> = match round % 2 {
            0 => rows.clone(),
            _ => rows.iter().filter(|r| r.x == Some(2)).cloned().collect(),
        };
        let filter = if round % 2 == 1 { "D/X eq 2" } else { "" };
        let request = pb::QueryEntitiesRequest {
            page_size,
            filter: filter.into(),
            ..sorted_query(&terms)
        };
        let streamed = scan_all(&mut client, request.clone()).await;
        let expected = model_order(&filtered, &terms);
        assert_eq!(keys(&streamed), expected, "round {round}: {terms:?}");
        // A stream started from a sorted page's token goes on after that page.
        let first = pb::QueryEntitiesRequest {
            page_size: 5,
            ..request.clone()
        };
        let page = client.query_entities(first).await.unwrap().into_inner();
        let rest = pb::QueryEntitiesRequest {
            continuation_token: page.continuation_token,
            ..request
        };
        let resumed = scan_all(&mut client, rest).await;
        assert_eq!(
            keys(&resumed),
            expected[page.entities.len()..],
            "round {round}"
        );
    }
}

#[tokio::test]
async fn an_index_whose_order_is_the_ordering_serves_it_without_a_sort() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let index = |name: &str, path: &str, scope: pb::IndexScope| pb::IndexDefinition {
        name: name.into(),
        properties: vec![path.into()],
        scope: scope as i32,
        unique: false,
    };
    let indexes = vec![
        index("ByV", "V", pb::IndexScope::Table),
        index("ByX", "D/X", pb::IndexScope::Partition),
    ];
    let create = pb::CreateTableRequest {
        table: T.into(),
        indexes,
        ..Default::default()
    };
    client.create_table(create).await.unwrap();
    let rows = load(&mut client, &mut Rng::new(0x1d), 300).await;
    let with_v: Vec<Row> = rows.iter().filter(|r| r.v.is_some()).cloned().collect();
    let in_p2: Vec<Row> = (rows.iter())
        .filter(|r| r.pk == "p2" && r.x.is_some())
        .cloned()
        .collect();
    for (index, partition, terms, expected, plan) in [
        (
            "ByV",
            None,
            [(Term::V, false)],
            &with_v,
            "index:ByV (order_by)",
        ),
        ("ByV", None, [(Term::V, true)], &with_v, "index:ByV"),
        (
            "ByX",
            Some("p2"),
            [(Term::X, false)],
            &in_p2,
            "index:ByX (order_by)",
        ),
    ] {
        let request = pb::QueryEntitiesRequest {
            index: index.into(),
            partition_key: partition.map(str::to_owned),
            page_size: 7,
            ..sorted_query(&terms)
        };
        let expected = model_order(expected, &terms);
        let page = client.query_entities(request.clone()).await.unwrap();
        assert_eq!(page.into_inner().stats.unwrap().plan, plan, "{terms:?}");
        let (paged, sizes) = query_all(&mut client, request.clone()).await;
        assert_eq!(keys(&paged), expected, "{plan}: {terms:?}");
        assert!(sizes.iter().all(|n| *n <= 7));
        let streamed = scan_all(&mut client, request).await;
        assert_eq!(keys(&streamed), expected, "{plan}: {terms:?}, streamed");
    }
    // Over every partition a PARTITION index orders by partition first: sorted, not served.
    let across = pb::QueryEntitiesRequest {
        index: "ByX".into(),
        ..sorted_query(&[(Term::X, false)])
    };
    let page = client.query_entities(across.clone()).await.unwrap();
    assert_eq!(page.into_inner().stats.unwrap().plan, "index:ByX");
    let with_x: Vec<Row> = rows.iter().filter(|r| r.x.is_some()).cloned().collect();
    let (paged, _) = query_all(&mut client, across).await;
    assert_eq!(keys(&paged), model_order(&with_x, &[(Term::X, false)]));
}

#[tokio::test]
async fn the_sdk_sorts_by_paths_ascending_and_descending() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let rows = load(&mut client, &mut Rng::new(5), 60).await;
    let sdk = server.sdk().await;
    let sorted = sdk
        .table(T)
        .query::<trestle_client::Properties>()
        .order_by_desc("D/X")
        .order_by("V")
        .page_size(8)
        .all()
        .await
        .unwrap();
    let read: Vec<_> = sorted
        .into_iter()
        .map(|e| (e.key.partition_key, e.key.row_key))
        .collect();
    assert_eq!(
        read,
        model_order(&rows, &[(Term::X, true), (Term::V, false)])
    );
}

#[tokio::test]
async fn bad_orderings_are_refused() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    load(&mut client, &mut Rng::new(3), 30).await;
    let five = pb::QueryEntitiesRequest {
        order_by: vec![
            pb::OrderTerm {
                path: "V".into(),
                descending: false,
            };
            5
        ],
        ..sorted_query(&[])
    };
    let bad_path = sorted_query(&[]);
    let bad_path = pb::QueryEntitiesRequest {
        order_by: vec![pb::OrderTerm {
            path: "D//X".into(),
            descending: false,
        }],
        ..bad_path
    };
    let reversed = pb::QueryEntitiesRequest {
        reverse: true,
        ..sorted_query(&[(Term::V, false)])
    };
    for (request, says) in [
        (five, "at most 4"),
        (bad_path, "order_by path"),
        (reversed, "reverse cannot be combined with order_by"),
    ] {
        let status = assert_error(
            client.query_entities(request).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
        assert!(status.message().contains(says), "{status:?}");
    }
    let streamed = pb::QueryEntitiesRequest {
        continuation_token: "not-a-token".into(),
        ..sorted_query(&[(Term::V, false)])
    };
    let refused = client.scan_entities(streamed).await;
    assert_error(refused, Code::InvalidArgument, "InvalidInput");

    // A token resumes only the ordering it came from.
    let first = pb::QueryEntitiesRequest {
        page_size: 2,
        ..sorted_query(&[(Term::V, false)])
    };
    let page = client.query_entities(first).await.unwrap().into_inner();
    assert!(!page.continuation_token.is_empty());
    for other in [sorted_query(&[(Term::V, true)]), sorted_query(&[])] {
        let other = pb::QueryEntitiesRequest {
            continuation_token: page.continuation_token.clone(),
            ..other
        };
        let refused = client.query_entities(other).await;
        assert_error(refused, Code::InvalidArgument, "InvalidInput");
    }
}
