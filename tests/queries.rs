//! Filtered queries end to end: a model-based comparison with a naive evaluator (documents, paths
//! and `any`/`all` included), the planner's choices, paging under a selective filter, streaming
//! and counting.

mod common;

use std::cmp::Ordering;

use common::*;
use pb::value::Kind;
use tokio_stream::StreamExt;
use tonic::Code;
use trestle_proto::pb;
use trestle_server::scan::{MAX_EXAMINED_IN_ONE_PARTITION, MAX_EXAMINED_PER_CHUNK};

/// xorshift64*: a small deterministic generator, so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const KEYS: &[&str] = &["", "a", "ab", "b", "ba", "c", "é"];
const PROPS: &[&str] = &["A", "B", "C"];

/// Paths a generated filter compares: properties, and members of the documents some hold.
const PATHS: &[&str] = &["A", "B", "C", "A/X", "B/Y", "C/X", "A/X/Y"];

/// A property value: mostly a scalar, sometimes an object `{X, Y}` or an array of scalars and
/// such objects.
fn random_value(rng: &mut Rng) -> Kind {
    match rng.below(10) {
        0 => object(rng),
        1 => Kind::ArrayValue(pb::ArrayValue {
            values: (0..rng.below(4))
                .map(|_| pb::Value {
                    kind: Some(if rng.below(3) == 0 {
                        object(rng)
                    } else {
                        random_scalar(rng)
                    }),
                })
                .collect(),
        }),
        _ => random_scalar(rng),
    }
}

/// An object with members `X` and `Y`, each present or not, scalars or (X only) null.
fn object(rng: &mut Rng) -> Kind {
    let mut members = std::collections::BTreeMap::new();
    for name in ["X", "Y"] {
        match rng.below(4) {
            0 => {}
            1 if name == "X" => {
                members.insert(
                    name.to_owned(),
                    pb::Value {
                        kind: Some(Kind::NullValue(0)),
                    },
                );
            }
            _ => {
                members.insert(
                    name.to_owned(),
                    pb::Value {
                        kind: Some(random_scalar(rng)),
                    },
                );
            }
        }
    }
    Kind::ObjectValue(pb::ObjectValue { members })
}

fn random_scalar(rng: &mut Rng) -> Kind {
    match rng.below(8) {
        0 => Kind::StringValue(rng.pick(KEYS).to_string()),
        1 => Kind::Int32Value(rng.below(7) as i32 - 3),
        2 => Kind::Int64Value(rng.below(7) as i64 - 3),
        3 => Kind::DoubleValue(rng.below(7) as f64 / 2.0 - 1.5),
        4 => Kind::BoolValue(rng.below(2) == 1),
        5 => Kind::DatetimeValue(prost_types::Timestamp {
            seconds: rng.below(4) as i64 * 86_400,
            nanos: 0,
        }),
        6 => Kind::GuidValue(format!(
            "00000000-0000-0000-0000-00000000000{}",
            rng.below(4)
        )),
        _ => Kind::BinaryValue(vec![rng.below(3) as u8; rng.below(3)]),
    }
}

/// The filter literal for a value.
fn literal(kind: &Kind) -> String {
    match kind {
        Kind::StringValue(s) => format!("'{}'", s.replace('\'', "''")),
        Kind::Int32Value(v) => v.to_string(),
        Kind::Int64Value(v) => format!("{v}L"),
        Kind::DoubleValue(v) => format!("{v:?}"),
        Kind::BoolValue(v) => v.to_string(),
        Kind::DatetimeValue(t) => {
            format!("datetime'1970-01-{:02}T00:00:00Z'", 1 + t.seconds / 86_400)
        }
        Kind::GuidValue(g) => format!("guid'{g}'"),
        Kind::BinaryValue(b) => format!(
            "X'{}'",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
        Kind::NullValue(_) | Kind::ObjectValue(_) | Kind::ArrayValue(_) => {
            unreachable!("filters compare scalars")
        }
    }
}

/// A filter the test generates, renders, and evaluates itself.
#[derive(Debug, Clone)]
enum Filter {
    And(Box<Filter>, Box<Filter>),
    Or(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
    Compare(String, &'static str, Kind),
    /// `path/any(v: body)` (`all` when the flag is set); `any()` without a body.
    Lambda(bool, String, Option<Box<Filter>>),
}

fn random_filter(rng: &mut Rng, depth: usize) -> Filter {
    if depth == 0 || rng.below(3) == 0 {
        let (property, value) = match rng.below(4) {
            0 => (
                "PartitionKey".to_owned(),
                Kind::StringValue(rng.pick(KEYS).to_string()),
            ),
            1 => (
                "RowKey".to_owned(),
                Kind::StringValue(rng.pick(KEYS).to_string()),
            ),
            _ => (rng.pick(PATHS).to_string(), random_scalar(rng)),
        };
        return Filter::Compare(property, OPS[rng.below(6)], value);
    }
    if rng.below(5) == 0 {
        return random_lambda(rng);
    }
    match rng.below(3) {
        0 => Filter::And(
            Box::new(random_filter(rng, depth - 1)),
            Box::new(random_filter(rng, depth - 1)),
        ),
        1 => Filter::Or(
            Box::new(random_filter(rng, depth - 1)),
            Box::new(random_filter(rng, depth - 1)),
        ),
        _ => Filter::Not(Box::new(random_filter(rng, depth - 1))),
    }
}

const OPS: [&str; 6] = ["eq", "ne", "gt", "ge", "lt", "le"];

/// `any`/`all` over a property, its body comparing the element `v`, a member of it, or (and/or)
/// a property of the entity.
fn random_lambda(rng: &mut Rng) -> Filter {
    let all = rng.below(2) == 1;
    let collection = rng.pick(PROPS).to_string();
    if !all && rng.below(4) == 0 {
        return Filter::Lambda(false, collection, None);
    }
    let element = |rng: &mut Rng| {
        let path = *rng.pick(&["v", "v/X", "v/Y"]);
        Filter::Compare(path.to_owned(), OPS[rng.below(6)], random_scalar(rng))
    };
    let first = element(rng);
    let body = match rng.below(3) {
        0 => first,
        1 => Filter::And(Box::new(first), Box::new(element(rng))),
        _ => Filter::Or(
            Box::new(first),
            Box::new(Filter::Compare(
                rng.pick(PROPS).to_string(),
                OPS[rng.below(6)],
                random_scalar(rng),
            )),
        ),
    };
    Filter::Lambda(all, collection, Some(Box::new(body)))
}

fn render(filter: &Filter) -> String {
    match filter {
        Filter::And(a, b) => format!("({} and {})", render(a), render(b)),
        Filter::Or(a, b) => format!("({} or {})", render(a), render(b)),
        Filter::Not(a) => format!("not ({})", render(a)),
        Filter::Compare(p, op, v) => format!("{p} {op} {}", literal(v)),
        Filter::Lambda(all, collection, body) => {
            let word = if *all { "all" } else { "any" };
            match body {
                Some(body) => format!("{collection}/{word}(v: {})", render(body)),
                None => format!("{collection}/{word}()"),
            }
        }
    }
}

/// The naive evaluator: Azure's documented semantics, written independently of the server, with
/// paths and lambdas as docs/semantics.md states them. `element` is the lambda's `v`.
fn holds(filter: &Filter, e: &pb::Entity) -> bool {
    holds_at(filter, e, None)
}

/// The value at a `/`-separated path, from the lambda's element when it starts with `v`.
fn at_path(path: &str, e: &pb::Entity, element: Option<&Kind>) -> Option<Kind> {
    let mut steps = path.split('/');
    let first = steps.next()?;
    let mut value = match (first, element) {
        ("PartitionKey", _) => Kind::StringValue(e.partition_key.clone()),
        ("RowKey", _) => Kind::StringValue(e.row_key.clone()),
        ("v", Some(element)) => element.clone(),
        (name, _) => e.properties.get(name)?.kind.clone()?,
    };
    for step in steps {
        value = match value {
            Kind::ObjectValue(object) => object.members.get(step)?.kind.clone()?,
            _ => return None,
        };
    }
    Some(value)
}

fn holds_at(filter: &Filter, e: &pb::Entity, element: Option<&Kind>) -> bool {
    match filter {
        Filter::And(a, b) => holds_at(a, e, element) && holds_at(b, e, element),
        Filter::Or(a, b) => holds_at(a, e, element) || holds_at(b, e, element),
        Filter::Not(a) => !holds_at(a, e, element),
        Filter::Lambda(all, collection, body) => {
            let Some(Kind::ArrayValue(array)) = at_path(collection, e, None) else {
                return false;
            };
            let mut elements = array.values.iter().filter_map(|v| v.kind.as_ref());
            match (all, body) {
                (false, None) => elements.next().is_some(),
                (false, Some(body)) => elements.any(|v| holds_at(body, e, Some(v))),
                (true, body) => {
                    elements.all(|v| body.as_ref().is_none_or(|b| holds_at(b, e, Some(v))))
                }
            }
        }
        Filter::Compare(property, op, literal) => {
            let Some(value) = at_path(property, e, element) else {
                return false;
            };
            let ordering = match (&value, literal) {
                (Kind::StringValue(a), Kind::StringValue(b)) => {
                    Some(a.as_bytes().cmp(b.as_bytes()))
                }
                (Kind::Int32Value(a), Kind::Int32Value(b)) => Some(a.cmp(b)),
                (Kind::Int64Value(a), Kind::Int32Value(b)) => Some(a.cmp(&(*b as i64))),
                (Kind::Int64Value(a), Kind::Int64Value(b)) => Some(a.cmp(b)),
                (Kind::DoubleValue(a), Kind::Int32Value(b)) => a.partial_cmp(&(*b as f64)),
                (Kind::DoubleValue(a), Kind::Int64Value(b)) => a.partial_cmp(&(*b as f64)),
                (Kind::DoubleValue(a), Kind::DoubleValue(b)) => a.partial_cmp(b),
                (Kind::BoolValue(a), Kind::BoolValue(b)) => Some(a.cmp(b)),
                (Kind::DatetimeValue(a), Kind::DatetimeValue(b)) => {
                    Some((a.seconds, a.nanos).cmp(&(b.seconds, b.nanos)))
                }
                (Kind::GuidValue(a), Kind::GuidValue(b)) => Some(a.cmp(b)),
                (Kind::BinaryValue(a), Kind::BinaryValue(b)) => Some(a.cmp(b)),
                // A type mismatch compares as "less than".
                _ => Some(Ordering::Less),
            };
            let Some(ordering) = ordering else {
                return *op == "ne";
            };
            match *op {
                "eq" => ordering == Ordering::Equal,
                "ne" => ordering != Ordering::Equal,
                "gt" => ordering == Ordering::Greater,
                "ge" => ordering != Ordering::Less,
                "lt" => ordering == Ordering::Less,
                _ => ordering != Ordering::Greater,
            }
        }
    }
}

async fn stream_all(client: &mut RawClient, request: pb::QueryEntitiesRequest) -> Vec<pb::Entity> {
    let mut stream = client
        .scan_entities(request)
        .await
        .expect("scan")
        .into_inner();
    let mut all = Vec::new();
    while let Some(batch) = stream.next().await {
        all.extend(batch.expect("batch").entities);
    }
    all
}

async fn count(client: &mut RawClient, request: pb::QueryEntitiesRequest) -> u64 {
    client
        .count_entities(request)
        .await
        .expect("count")
        .into_inner()
        .count
}

#[tokio::test]
async fn random_filters_and_key_ranges_agree_with_a_naive_evaluation() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table("Model").await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut all = Vec::new();
    for pk in KEYS {
        for rk in KEYS.iter().chain(&["aa", "b0", "c1", "zz"]) {
            let mut properties: Vec<(&str, pb::Value)> = Vec::new();
            for p in PROPS {
                if rng.below(4) != 0 {
                    properties.push((
                        p,
                        pb::Value {
                            kind: Some(random_value(&mut rng)),
                        },
                    ));
                }
            }
            let stored = client
                .insert_entity(insert_request("Model", entity(pk, rk, &properties)))
                .await
                .unwrap()
                .into_inner();
            all.push(stored);
        }
    }
    all.sort_by(|a, b| {
        (a.partition_key.as_bytes(), a.row_key.as_bytes())
            .cmp(&(b.partition_key.as_bytes(), b.row_key.as_bytes()))
    });

    for case in 0..150 {
        let filter = random_filter(&mut rng, 3);
        let mut request = pb::QueryEntitiesRequest {
            table: "Model".into(),
            filter: render(&filter),
            reverse: rng.below(2) == 1,
            page_size: 1 + rng.below(20) as u32,
            ..Default::default()
        };
        if rng.below(2) == 1 {
            request.partition_key = Some(rng.pick(KEYS).to_string());
            match rng.below(3) {
                0 => request.row_key_prefix = rng.pick(KEYS).to_string(),
                1 => {
                    request.row_key_start = rng.pick(KEYS).to_string();
                    request.row_key_end = rng.pick(KEYS).to_string();
                }
                _ => {}
            }
        }
        let in_key_fields = |e: &pb::Entity| {
            let Some(pk) = &request.partition_key else {
                return true;
            };
            let rk = e.row_key.as_bytes();
            e.partition_key == *pk
                && rk.starts_with(request.row_key_prefix.as_bytes())
                && rk >= request.row_key_start.as_bytes()
                && (request.row_key_end.is_empty() || rk < request.row_key_end.as_bytes())
        };
        let mut expected: Vec<_> = all
            .iter()
            .filter(|e| in_key_fields(e) && holds(&filter, e))
            .cloned()
            .collect();
        if request.reverse {
            expected.reverse();
        }
        let (paged, _) = query_all(&mut client, request.clone()).await;
        assert_eq!(keys(&paged), keys(&expected), "case {case}: {request:?}");
        assert_eq!(paged, expected, "case {case}: properties");
        let streamed = stream_all(&mut client, request.clone()).await;
        assert_eq!(
            keys(&streamed),
            keys(&expected),
            "case {case} streamed: {request:?}"
        );
        assert_eq!(
            count(&mut client, request.clone()).await,
            expected.len() as u64,
            "case {case} count: {request:?}"
        );
    }
}

/// 100 partitions `p000`…`p099` of `rows` rows `r0000`… with `V` = row number and `Rare`
/// on the first two entities of the table.
async fn load_grid(client: &mut RawClient, table: &str, rows: usize) {
    client
        .create_table(pb::CreateTableRequest {
            table: table.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for p in 0..100 {
        let pk = format!("p{p:03}");
        for chunk in (0..rows).collect::<Vec<_>>().chunks(100) {
            let ops = chunk
                .iter()
                .map(|r| {
                    let mut props = vec![("V", int32(*r as i32))];
                    if p * rows + r < 2 {
                        props.push((
                            "Rare",
                            pb::Value {
                                kind: Some(Kind::BoolValue(true)),
                            },
                        ));
                    }
                    tx_insert(entity(&pk, &format!("r{r:04}"), &props))
                })
                .collect();
            client
                .submit_transaction(transaction(table, &pk, ops))
                .await
                .unwrap();
        }
    }
}

/// Follows a query to its end, returning (entities, plan, entities examined, page sizes).
async fn run_query(
    client: &mut RawClient,
    request: pb::QueryEntitiesRequest,
) -> (Vec<pb::Entity>, String, u64, Vec<usize>) {
    let (mut request, mut entities, mut examined, mut pages, mut plan) =
        (request, Vec::new(), 0, Vec::new(), String::new());
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        let stats = page.stats.expect("stats");
        plan = if plan.is_empty() { stats.plan } else { plan };
        examined += stats.entities_examined;
        pages.push(page.entities.len());
        entities.extend(page.entities);
        if page.continuation_token.is_empty() {
            return (entities, plan, examined, pages);
        }
        request.continuation_token = page.continuation_token;
    }
}

fn filtered(table: &str, filter: &str, page_size: u32) -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: table.into(),
        filter: filter.into(),
        page_size,
        ..Default::default()
    }
}

#[tokio::test]
async fn the_planner_reads_only_what_the_keys_allow_in_a_100k_table() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    load_grid(&mut client, "Grid", 1000).await;

    let (found, plan, examined, _) = run_query(
        &mut client,
        filtered("Grid", "PartitionKey eq 'p042' and V ge 990", 1000),
    )
    .await;
    assert_eq!(
        (found.len(), plan.as_str(), examined),
        (10, "partition", 1000)
    );

    let (found, plan, examined, _) = run_query(
        &mut client,
        filtered("Grid", "PartitionKey eq 'p042' and RowKey eq 'r0007'", 1000),
    )
    .await;
    assert_eq!((found.len(), plan.as_str(), examined), (1, "point", 1));

    let (found, plan, examined, _) = run_query(
        &mut client,
        filtered(
            "Grid",
            "PartitionKey eq 'p042' and RowKey ge 'r0100' and RowKey lt 'r0200'",
            1000,
        ),
    )
    .await;
    assert_eq!(
        (found.len(), plan.as_str(), examined),
        (100, "partition", 100)
    );

    let union =
        "(PartitionKey eq 'p001' or PartitionKey eq 'p050' or PartitionKey eq 'p099') and V lt 5";
    let (found, plan, examined, _) = run_query(&mut client, filtered("Grid", union, 1000)).await;
    assert_eq!(
        (found.len(), plan.as_str(), examined),
        (15, "partition_union", 3000)
    );
    assert_eq!(found[0].partition_key, "p001");
    assert_eq!(found[14].partition_key, "p099");

    let range = "PartitionKey ge 'p010' and PartitionKey lt 'p013' and V eq 3";
    let (found, plan, examined, _) = run_query(&mut client, filtered("Grid", range, 1000)).await;
    assert_eq!(
        (found.len(), plan.as_str(), examined),
        (3, "partition_range", 3000)
    );

    let request = pb::QueryEntitiesRequest {
        partition_key: Some("p007".into()),
        ..filtered("Grid", "V lt 3", 1000)
    };
    let (found, plan, examined, _) = run_query(&mut client, request).await;
    assert_eq!(
        (found.len(), plan.as_str(), examined),
        (3, "partition", 1000)
    );

    let (found, plan, examined, _) = run_query(
        &mut client,
        filtered(
            "Grid",
            "PartitionKey eq 'p001' and PartitionKey eq 'p002'",
            1000,
        ),
    )
    .await;
    assert_eq!((found.len(), plan.as_str(), examined), (0, "empty", 0));

    // A selective filter with nothing bounding the keys: short pages, then empty ones (the matches
    // are the table's first two entities), every match found.
    let (found, plan, examined, pages) =
        run_query(&mut client, filtered("Grid", "Rare eq true", 1000)).await;
    assert_eq!(plan, "table_scan");
    assert_eq!(examined, 100_000);
    assert_eq!(found.len(), 2);
    assert!(
        pages.len() >= 100_000 / MAX_EXAMINED_PER_CHUNK && pages.contains(&0),
        "work per page is bounded: {pages:?}"
    );

    // 2,500 matches over all partitions, at page sizes 1, 7 and 1000.
    for page_size in [1000, 7, 1] {
        let (found, _, _, pages) =
            run_query(&mut client, filtered("Grid", "V lt 25", page_size)).await;
        assert_eq!(found.len(), 2500, "page size {page_size}");
        assert!(pages.iter().all(|n| *n <= page_size as usize));
        let expected: Vec<_> = (0..100)
            .flat_map(|p| (0..25).map(move |r| (format!("p{p:03}"), format!("r{r:04}"))))
            .collect();
        assert_eq!(keys(&found), expected);
    }
    let request = filtered("Grid", "V lt 25", 0);
    assert_eq!(count(&mut client, request.clone()).await, 2500);
    assert_eq!(stream_all(&mut client, request).await.len(), 2500);
}

#[tokio::test]
async fn a_page_examines_a_bounded_share_of_one_large_partition() {
    // A scan holds a partition's lock while it reads it, so a page stops within one partition long
    // before its overall bound: a commit to a large partition never waits for a whole page.
    let server = TestServer::start().await;
    let mut client = server.client_with_table("Log").await;
    const ROWS: usize = 25_000;
    fill_partition(&mut client, "Log", "p", ROWS).await;
    const _: () = assert!(MAX_EXAMINED_IN_ONE_PARTITION < ROWS && ROWS < MAX_EXAMINED_PER_CHUNK);
    let (found, plan, examined, pages) =
        run_query(&mut client, filtered("Log", "V eq -1", 1000)).await;
    assert_eq!(
        (found.len(), plan.as_str(), examined),
        (0, "table_scan", ROWS as u64)
    );
    assert_eq!(pages.len(), ROWS.div_ceil(MAX_EXAMINED_IN_ONE_PARTITION));
}

#[tokio::test]
async fn malformed_filters_are_invalid_input_with_the_offset() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table("Bad").await;
    for (filter, offset) in [
        ("Age eq 5454161346626", 7),
        ("(Age eq 1", 0),
        ("Age eq null", 7),
        ("startswith(Name, 'a')", 0),
        ("Age ~ 1", 4),
    ] {
        let request = filtered("Bad", filter, 0);
        let status = assert_error(
            client.query_entities(request.clone()).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
        assert!(status.message().contains(filter), "{}", status.message());
        assert!(
            status.message().contains(&format!("at byte {offset}")),
            "{}",
            status.message()
        );
        assert_error(
            client.count_entities(request.clone()).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
        // Refused when the scan opens (or, from an older server, as the stream's first item).
        let refused = match client.scan_entities(request).await {
            Err(status) => Err(status),
            Ok(stream) => stream.into_inner().next().await.expect("an error item"),
        };
        assert_error(refused, Code::InvalidArgument, "InvalidInput");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200k_entity_scan_streams_end_to_end_and_cancelling_frees_the_server() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    load_grid(&mut client, "Stream", 2000).await;
    let all = pb::QueryEntitiesRequest {
        table: "Stream".into(),
        ..Default::default()
    };

    let mut stream = client
        .scan_entities(all.clone())
        .await
        .unwrap()
        .into_inner();
    let (mut received, mut last) = (0usize, None::<(String, String)>);
    while let Some(batch) = stream.next().await {
        for entity in batch.unwrap().entities {
            let key = (entity.partition_key, entity.row_key);
            assert!(last.as_ref().is_none_or(|l| *l < key), "in order");
            last = Some(key);
            received += 1;
        }
    }
    assert_eq!(received, 200_000);

    // Read one batch, then walk away: the server stops reading at the next batch it cannot send.
    let mut abandoned = client
        .scan_entities(all.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(!abandoned.next().await.unwrap().unwrap().entities.is_empty());
    drop(abandoned);
    let started = std::time::Instant::now();
    client
        .insert_entity(insert_request("Stream", entity("after", "cancel", &[])))
        .await
        .unwrap();
    assert_eq!(
        count(
            &mut client,
            pb::QueryEntitiesRequest {
                filter: "V lt 1".into(),
                ..all
            }
        )
        .await,
        100
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the server is not busy with the abandoned scan"
    );
}

#[tokio::test]
async fn a_filter_may_read_properties_the_select_drops() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table("Proj").await;
    for i in 0..10 {
        client
            .insert_entity(insert_request(
                "Proj",
                entity(
                    "p",
                    &format!("{i}"),
                    &[("A", int32(i)), ("B", int32(i * 10)), ("C", string("x"))],
                ),
            ))
            .await
            .unwrap();
    }
    let request = pb::QueryEntitiesRequest {
        select: vec!["A".into()],
        ..filtered("Proj", "B ge 70 and C eq 'x'", 0)
    };
    let (found, _, _, _) = run_query(&mut client, request.clone()).await;
    assert_eq!(
        found
            .iter()
            .map(|e| e.properties["A"].clone())
            .collect::<Vec<_>>(),
        [int32(7), int32(8), int32(9)]
    );
    assert!(found.iter().all(|e| e.properties.len() == 1));
    assert_eq!(stream_all(&mut client, request).await.len(), 3);
}

/// The resident memory of this process (client and in-process server), in bytes.
fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_make_the_server_buffer_the_table() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table("Wide").await;
    // 3,000 entities of 40 KiB: 120 MiB, far more than the stream may buffer.
    for chunk in 0..60 {
        let ops = (0..50)
            .map(|i| {
                tx_insert(entity(
                    "p",
                    &format!("{chunk:03}-{i:02}"),
                    &[("Blob", binary(vec![i as u8; 40 * 1024]))],
                ))
            })
            .collect();
        client
            .submit_transaction(transaction("Wide", "p", ops))
            .await
            .unwrap();
    }
    let request = pb::QueryEntitiesRequest {
        table: "Wide".into(),
        page_size: 10,
        ..Default::default()
    };
    let before = resident_bytes();
    let mut stream = client.scan_entities(request).await.unwrap().into_inner();
    let first = stream.next().await.unwrap().unwrap();
    // At most a page, and at most a streamed batch's bytes (about three of these entities).
    assert!((1..=10).contains(&first.entities.len()));
    let first_len = first.entities.len();
    // Give the server every chance to run ahead of the reader.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let growth = resident_bytes().saturating_sub(before);
    assert!(
        growth < 48 << 20,
        "the server buffered {} MiB for a reader that stopped",
        growth >> 20
    );
    let mut rest = first_len;
    while let Some(batch) = stream.next().await {
        rest += batch.unwrap().entities.len();
    }
    assert_eq!(rest, 3000);
}
