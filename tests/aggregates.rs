//! `AggregateEntities` end to end, on either store: random entities (numbers of three types,
//! strings and missing values in the aggregated property; missing group values) compared
//! with a model's answer for every function, grouped and not, over a partition and a filter;
//! long aggregates carried across calls by continuation tokens; and every refusal (bounds,
//! overflow, bad paths, tokens of something else) with its reason, changing nothing.

mod common;

#[path = "common/rng.rs"]
mod rng;

use std::collections::BTreeMap;

use common::{assert_error, entity, int32, int64, string, TestServer};
use rng::Rng;
use tonic::Code;
use trestle_client::{Filter, Value};
use trestle_proto::pb;

const T: &str = "Orders";

fn double(v: f64) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::DoubleValue(v)),
    }
}

/// An amount as the model keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Amount {
    Int32(i32),
    Int64(i64),
    Double(f64),
}

impl Amount {
    fn as_f64(self) -> f64 {
        match self {
            Amount::Int32(v) => f64::from(v),
            Amount::Int64(v) => v as f64,
            Amount::Double(v) => v,
        }
    }

    fn value(self) -> Value {
        match self {
            Amount::Int32(v) => Value::Int32(v),
            Amount::Int64(v) => Value::Int64(v),
            Amount::Double(v) => Value::Double(v),
        }
    }
}

/// One entity of the model: its region (if any), its amount (a number, a string, or none), its
/// kind.
#[derive(Debug, Clone)]
struct Row {
    region: Option<String>,
    amount: Option<Amount>,
    label: Option<String>,
    kind: &'static str,
}

/// What the server should answer for [count, count_of Amount, sum, avg, min, max] over `rows`
/// (in key order).
fn model(rows: &[&Row]) -> Vec<Value> {
    let numbers: Vec<Amount> = rows.iter().filter_map(|row| row.amount).collect();
    let with_amount = rows
        .iter()
        .filter(|row| row.amount.is_some() || row.label.is_some())
        .count();
    let sum = match numbers.iter().any(|n| matches!(n, Amount::Double(_))) {
        _ if numbers.is_empty() => Value::Null,
        false => Value::Int64(
            numbers
                .iter()
                .map(|n| match n {
                    Amount::Int32(v) => i64::from(*v),
                    Amount::Int64(v) => *v,
                    Amount::Double(_) => unreachable!(),
                })
                .sum(),
        ),
        true => {
            // In key order: integers summed exactly until the first Double, then as Doubles.
            let mut integer: Option<i64> = None;
            let mut double: Option<f64> = None;
            for n in &numbers {
                match (n, double) {
                    (Amount::Double(v), None) => {
                        double = Some(integer.map_or(0.0, |i| i as f64) + v)
                    }
                    (n, Some(d)) => double = Some(d + n.as_f64()),
                    (n, None) => integer = Some(integer.unwrap_or(0) + n.as_f64() as i64),
                }
            }
            Value::Double(double.unwrap())
        }
    };
    let avg = match numbers.is_empty() {
        true => Value::Null,
        false => match &sum {
            Value::Int64(s) => Value::Double(*s as f64 / numbers.len() as f64),
            Value::Double(s) => Value::Double(s / numbers.len() as f64),
            _ => unreachable!(),
        },
    };
    let by_value = |a: &&Amount, b: &&Amount| a.as_f64().total_cmp(&b.as_f64());
    let labels: Vec<&String> = rows.iter().filter_map(|row| row.label.as_ref()).collect();
    // Strings order after every number.
    let min = match numbers.iter().min_by(by_value) {
        Some(n) => n.value(),
        None => labels
            .iter()
            .min()
            .map_or(Value::Null, |s| Value::from(s.as_str())),
    };
    // The first of equal maximums, as the server keeps the first it meets.
    let first_max = numbers
        .iter()
        .fold(None, |best: Option<&Amount>, n| match best {
            Some(b) if by_value(&n, &b).is_le() => Some(b),
            _ => Some(n),
        });
    let max = match labels.iter().max() {
        Some(s) => Value::from(s.as_str()),
        None => first_max.map_or(Value::Null, |n| n.value()),
    };
    vec![
        Value::Int64(rows.len() as i64),
        Value::Int64(with_amount as i64),
        sum,
        avg,
        min,
        max,
    ]
}

fn random_row(rng: &mut Rng) -> Row {
    let regions = ["east", "north", "west"];
    let region = (rng.below(5) > 0).then(|| regions[rng.below(3)].to_owned());
    let (amount, label) = match rng.below(6) {
        0 => (Some(Amount::Int32(rng.below(1_000) as i32 - 300)), None),
        // Small enough that no Double sum loses what the model keeps exactly.
        1 => (Some(Amount::Int64(rng.below(1 << 20) as i64)), None),
        2 => (Some(Amount::Double(rng.below(10_000) as f64 / 8.0)), None),
        3 => (None, Some(format!("label-{}", rng.below(50)))),
        _ => (None, None),
    };
    let kind = ["a", "b"][rng.below(2)];
    Row {
        region,
        amount,
        label,
        kind,
    }
}

fn wire(pk: &str, rk: &str, row: &Row) -> pb::Entity {
    let mut properties = vec![("Kind", string(row.kind))];
    if let Some(region) = &row.region {
        properties.push(("Region", string(region)));
    }
    match (row.amount, &row.label) {
        (Some(Amount::Int32(v)), _) => properties.push(("Amount", int32(v))),
        (Some(Amount::Int64(v)), _) => properties.push(("Amount", int64(v))),
        (Some(Amount::Double(v)), _) => properties.push(("Amount", double(v))),
        (None, Some(label)) => properties.push(("Amount", string(label))),
        (None, None) => {}
    }
    entity(pk, rk, &properties)
}

fn values(groups: &[trestle_client::AggregateGroup]) -> Vec<(Vec<Value>, Vec<Value>, u64)> {
    groups
        .iter()
        .map(|g| (g.keys.clone(), g.values.clone(), g.entities))
        .collect()
}

/// Inserts `count` random rows (seeded by `seed`) over `partitions` partitions, one at a time.
async fn insert_random(
    client: &mut common::RawClient,
    seed: u64,
    count: usize,
    partitions: usize,
) -> BTreeMap<(String, String), Row> {
    let mut rng = Rng::new(seed);
    let mut rows = BTreeMap::new();
    for n in 0..count {
        let (pk, rk) = (format!("p{}", n % partitions), format!("r{n:04}"));
        let row = random_row(&mut rng);
        let request = common::insert_request(T, wire(&pk, &rk, &row));
        client.insert_entity(request).await.unwrap();
        rows.insert((pk, rk), row);
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_match_a_model_over_random_mixed_values_grouped_and_not() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let mut rows = insert_random(&mut client, 0x5eed_a66e, 400, 4).await;
    let table = server.sdk().await.table(T);
    let all =
        |rows: &BTreeMap<(String, String), Row>| -> Vec<Row> { rows.values().cloned().collect() };
    let every = |aggregate: trestle_client::Aggregate| {
        aggregate
            .count()
            .count_of("Amount")
            .sum("Amount")
            .avg("Amount")
            .min("Amount")
            .max("Amount")
    };

    // The whole table, one group.
    let groups = every(table.aggregate()).groups().await.unwrap();
    let everything = all(&rows);
    let expected = model(&everything.iter().collect::<Vec<_>>());
    assert_eq!(values(&groups), [(vec![], expected, 400)]);

    // One partition, a filter, grouped by region (missing first, as null).
    let groups = every(table.aggregate())
        .partition("p1")
        .filter(Filter::eq("Kind", "a"))
        .group_by("Region")
        .groups()
        .await
        .unwrap();
    let mut by_region: BTreeMap<Option<String>, Vec<&Row>> = BTreeMap::new();
    for ((pk, _), row) in &rows {
        if pk == "p1" && row.kind == "a" {
            by_region.entry(row.region.clone()).or_default().push(row);
        }
    }
    let expected: Vec<(Vec<Value>, Vec<Value>, u64)> = by_region
        .iter()
        .map(|(region, rows)| {
            let key = region.as_deref().map_or(Value::Null, Value::from);
            (vec![key], model(rows), rows.len() as u64)
        })
        .collect();
    assert_eq!(values(&groups), expected);

    // The same as typed rows, each column by its name.
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct ByRegion {
        #[serde(rename = "Region")]
        region: Option<String>,
        count: i64,
        #[serde(rename = "count_Amount")]
        counted: i64,
        total: Option<f64>,
        entities: u64,
    }
    let typed = table
        .aggregate()
        .partition("p1")
        .filter(Filter::eq("Kind", "a"))
        .count()
        .count_of("Amount")
        .sum("Amount")
        .alias("total")
        .group_by("Region")
        .run::<ByRegion>()
        .await
        .unwrap();
    let number = |value: &Value| match value {
        Value::Int64(n) => Some(*n as f64),
        Value::Double(n) => Some(*n),
        _ => None,
    };
    let expected: Vec<ByRegion> = groups
        .iter()
        .map(|group| ByRegion {
            region: match &group.keys[0] {
                Value::String(region) => Some(region.clone()),
                _ => None,
            },
            count: group.entities as i64,
            counted: number(&group.values[1]).unwrap() as i64,
            total: number(&group.values[2]),
            entities: group.entities,
        })
        .collect();
    assert_eq!(typed, expected);
    let twice = table.aggregate().count().count().run::<ByRegion>().await;
    let refused = twice.unwrap_err().to_string();
    assert!(
        refused.contains(r#"two columns of the aggregate are named "count""#),
        "{refused}"
    );
    let undecodable = table.aggregate().sum("Amount").run::<ByRegion>().await;
    let refused = undecodable.unwrap_err().to_string();
    assert!(refused.contains("does not decode as"), "{refused}");

    // Writes between two calls are seen by the second.
    let extra = Row {
        region: Some("east".into()),
        amount: Some(Amount::Int32(7)),
        label: None,
        kind: "a",
    };
    let request = common::insert_request(T, wire("p1", "zzz", &extra));
    client.insert_entity(request).await.unwrap();
    rows.insert(("p1".into(), "zzz".into()), extra);
    let groups = table
        .aggregate()
        .count()
        .sum("Amount")
        .groups()
        .await
        .unwrap();
    let everything = all(&rows);
    let expected = model(&everything.iter().collect::<Vec<_>>());
    assert_eq!(groups[0].values, [expected[0].clone(), expected[2].clone()]);

    // Nothing matches: one group of nothing.
    let groups = table
        .aggregate()
        .filter(Filter::eq("Kind", "none"))
        .count()
        .max("Amount")
        .groups()
        .await
        .unwrap();
    assert_eq!(
        values(&groups),
        [(vec![], vec![Value::Int64(0), Value::Null], 0)]
    );
}

/// A server bounded to 37 entities examined per aggregate call answers tokens carrying the
/// groups so far (no groups with them), each call within the bound, and the answer after the
/// last equals the model's; the SDK follows them. A token resumes only its own aggregate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_aggregates_continue_across_calls_with_tokens_carrying_their_groups() {
    use pb::AggregateFunction as F;
    const BOUND: u64 = 37;
    let server = TestServer::start_with(|config| {
        config.limits.aggregate_examined_per_call = BOUND;
    })
    .await;
    let mut client = server.client_with_table(T).await;
    let rows = insert_random(&mut client, 0xca77, 300, 7).await;
    let every = [
        (F::Count, ""),
        (F::Count, "Amount"),
        (F::Sum, "Amount"),
        (F::Avg, "Amount"),
        (F::Min, "Amount"),
        (F::Max, "Amount"),
    ];
    let mut request = aggregate_request(&every, &["Region"]);
    let (mut calls, mut examined) = (0, 0);
    let last = loop {
        let answer = client
            .aggregate_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        calls += 1;
        let read = answer.stats.as_ref().unwrap().entities_examined;
        assert!(read <= BOUND, "call {calls} examined {read}");
        examined += read;
        if answer.continuation_token.is_empty() {
            break answer;
        }
        assert!(answer.groups.is_empty(), "no groups before the last call");
        let query = request.query.as_mut().unwrap();
        query.continuation_token = answer.continuation_token;
    };
    assert_eq!(examined, 300);
    assert!(calls >= 300 / BOUND, "{calls} calls");
    let mut by_region: BTreeMap<Option<String>, Vec<&Row>> = BTreeMap::new();
    for row in rows.values() {
        by_region.entry(row.region.clone()).or_default().push(row);
    }
    assert_eq!(last.groups.len(), by_region.len());
    let expected: Vec<(Vec<Value>, Vec<Value>, u64)> = by_region
        .iter()
        .map(|(region, rows)| {
            let key = region.as_deref().map_or(Value::Null, Value::from);
            (vec![key], model(rows), rows.len() as u64)
        })
        .collect();
    let table = server.sdk().await.table(T);
    let sdk = (table.aggregate().count().count_of("Amount").sum("Amount"))
        .avg("Amount")
        .min("Amount")
        .max("Amount")
        .group_by("Region")
        .groups()
        .await
        .unwrap();
    assert_eq!(values(&sdk), expected, "the SDK follows the tokens");

    // A token goes on with its own aggregate only; a page's token is not an aggregate's.
    let first = client
        .aggregate_entities(aggregate_request(&[(F::Sum, "Amount")], &[]))
        .await
        .unwrap()
        .into_inner();
    let token = first.continuation_token;
    assert!(!token.is_empty());
    let page = pb::QueryEntitiesRequest {
        table: T.into(),
        page_size: 3,
        ..Default::default()
    };
    let page_token = client.query_entities(page.clone()).await.unwrap();
    let page_token = page_token.into_inner().continuation_token;
    let mut altered = token.clone().into_bytes();
    altered[9] = if altered[9] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for (aggregations, group_by, token, says) in [
        (
            &[(F::Max, "Amount")][..],
            &[][..],
            &token,
            "not one of this aggregate's",
        ),
        (
            &[(F::Sum, "Amount")][..],
            &["Region"][..],
            &token,
            "not one of this aggregate's",
        ),
        (
            &[(F::Sum, "Amount")][..],
            &[][..],
            &page_token,
            "not an aggregate's",
        ),
        (&[(F::Sum, "Amount")][..], &[][..], &altered, "altered"),
    ] {
        let mut request = aggregate_request(aggregations, group_by);
        request.query.as_mut().unwrap().continuation_token = token.clone();
        let status = assert_error(
            client.aggregate_entities(request).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
        assert!(status.message().contains(says), "{says}: {status:?}");
    }
    let query_with_it = pb::QueryEntitiesRequest {
        continuation_token: token,
        ..page
    };
    let refused = client.query_entities(query_with_it).await;
    assert_error(refused, Code::InvalidArgument, "InvalidInput");
}

fn aggregate_request(
    aggregations: &[(pb::AggregateFunction, &str)],
    group_by: &[&str],
) -> pb::AggregateEntitiesRequest {
    pb::AggregateEntitiesRequest {
        query: Some(pb::QueryEntitiesRequest {
            table: T.into(),
            ..Default::default()
        }),
        aggregations: aggregations
            .iter()
            .map(|(function, path)| pb::Aggregation {
                function: *function as i32,
                path: (*path).into(),
            })
            .collect(),
        group_by: group_by.iter().map(|p| (*p).into()).collect(),
    }
}

/// Past a bound, or an Int64 sum that overflows, the call is refused with the reason, never
/// answered in part; a bad path or function is refused before anything is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_overflow_and_bad_requests_are_refused_with_their_reasons() {
    use pb::AggregateFunction as F;
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for chunk in 0..11 {
        let operations = (0..100)
            .map(|i| {
                let n = chunk * 100 + i;
                common::tx_insert(entity(
                    "p",
                    &format!("r{n:05}"),
                    &[("Id", int32(n)), ("Big", int64(i64::MAX / 2))],
                ))
            })
            .collect();
        let request = common::transaction(T, "p", operations);
        client.submit_transaction(request).await.unwrap();
    }
    let mut table_plan = client
        .aggregate_entities(aggregate_request(&[(F::Count, "")], &[]))
        .await
        .unwrap()
        .into_inner();
    let stats = table_plan.stats.take().unwrap();
    assert_eq!(stats.entities_examined, 1_100);
    assert_eq!(table_plan.groups[0].entities, 1_100);

    let refusals = [
        (
            aggregate_request(&[(F::Count, "")], &["Id"]),
            "more than 1000 groups",
        ),
        (
            aggregate_request(&[(F::Sum, "Big")], &[]),
            "passes Int64's range",
        ),
        (aggregate_request(&[], &[]), "a call takes 1 to 16"),
        (
            aggregate_request(&[(F::Sum, "")], &[]),
            "needs the path of a property",
        ),
        (
            aggregate_request(&[(F::Max, "A//B")], &[]),
            "aggregate path 'A//B' is invalid",
        ),
        (
            aggregate_request(&[(F::Unspecified, "Id")], &[]),
            "is not COUNT, SUM, AVG, MIN or MAX",
        ),
        (
            aggregate_request(&[(F::Count, "")], &["A", "B", "C", "D", "E"]),
            "groups by at most 4",
        ),
    ];
    for (request, reason) in refusals {
        let status = assert_error(
            client.aggregate_entities(request).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
        assert!(status.message().contains(reason), "{status:?}");
    }
    // Within the bound of groups, grouped by a value of 100 kinds.
    let fine = client
        .aggregate_entities(aggregate_request(&[(F::Min, "Id")], &["Big"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fine.groups.len(), 1);
    assert_eq!(fine.groups[0].values, [int32(0)]);
}
