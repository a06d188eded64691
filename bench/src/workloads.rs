//! The workloads: data loading and one function per measured workload.

use std::time::{Duration, Instant};

use crate::bench_pb::echo_client::EchoClient;
use crate::bench_pb::{EchoMessage, EchoStreamRequest};
use tonic::transport::Channel;
use trestle_proto::pb;
use trestle_proto::pb::table_service_client::TableServiceClient;

use crate::framed::Framed;
use crate::measure::{drive, Measurement, OpResult, Rng};

pub(crate) type Client = TableServiceClient<Channel>;

/// Sizes and timings of one run.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) partitions: u64,
    pub(crate) rows_per_partition: u64,
    pub(crate) scan_partition_rows: u64,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
}

impl Plan {
    pub(crate) fn entities(&self) -> u64 {
        self.partitions * self.rows_per_partition
    }
}

/// The main table: `partitions` × `rows_per_partition`, keys `p0000`/`r0000`.
pub(crate) const MAIN_TABLE: &str = "Bench";
pub(crate) const SCAN_TABLE: &str = "ScanBench";
pub(crate) const SCAN_PARTITION: &str = "s";

fn int32(v: i32) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Int32Value(v)),
    }
}

/// Names and values of `small_entity`'s string and int64 properties: constants, so that building
/// a request costs the load generator no formatting.
const STRING_PROPERTIES: [(&str, &str); 5] = [
    ("S0", "value-00"),
    ("S1", "value-01"),
    ("S2", "value-02"),
    ("S3", "value-03"),
    ("S4", "value-04"),
];
const INT64_PROPERTIES: [&str; 4] = ["L0", "L1", "L2", "L3"];

/// The 10 small properties of the benchmark's entities, `V` = `v`, in either value type (the wire's
/// or the storage engine's, for `--engine-only`).
pub(crate) fn small_properties<T>(
    v: i32,
    string: impl Fn(&str) -> T,
    int32: impl Fn(i32) -> T,
    int64: impl Fn(i64) -> T,
) -> std::collections::BTreeMap<String, T> {
    let mut properties = std::collections::BTreeMap::new();
    properties.insert("V".to_owned(), int32(v));
    for (name, value) in STRING_PROPERTIES {
        properties.insert(name.to_owned(), string(value));
    }
    for (i, name) in (0..).zip(INT64_PROPERTIES) {
        properties.insert(name.to_owned(), int64(i64::from(v) * i));
    }
    properties
}

/// An entity with 10 small properties, `V` = `v`.
pub(crate) fn small_entity(pk: String, rk: String, v: i32) -> pb::Entity {
    let value = |kind| pb::Value { kind: Some(kind) };
    pb::Entity {
        partition_key: pk,
        row_key: rk,
        properties: small_properties(
            v,
            |s| value(pb::value::Kind::StringValue(s.to_owned())),
            |i| value(pb::value::Kind::Int32Value(i)),
            |i| value(pb::value::Kind::Int64Value(i)),
        ),
        ..Default::default()
    }
}

fn insert_op(entity: pb::Entity) -> pb::TransactionOperation {
    pb::TransactionOperation {
        operation: Some(pb::transaction_operation::Operation::Insert(
            pb::InsertOperation {
                entity: Some(entity),
            },
        )),
    }
}

pub(crate) fn partition_key(p: u64) -> String {
    format!("p{p:04}")
}

pub(crate) fn row_key(r: u64) -> String {
    format!("r{r:04}")
}

/// Creates `table` and fills `partitions` × `rows` entities with 100-insert transactions from 8
/// concurrent loaders. Returns how long it took.
pub(crate) async fn load(client: &Client, table: &str, partitions: u64, rows: u64) -> Duration {
    let create = pb::CreateTableRequest {
        table: table.into(),
        ..Default::default()
    };
    load_with(client, create, partitions, rows, |p, r| {
        small_entity(partition_key(p), row_key(r), r as i32)
    })
    .await
}

/// Creates a table as `create` says and fills `partitions` × `rows` entities, `entity(p, r)`
/// each, with 100-insert transactions from 8 concurrent loaders. Returns how long it took.
pub(crate) async fn load_with(
    client: &Client,
    create: pb::CreateTableRequest,
    partitions: u64,
    rows: u64,
    entity: fn(u64, u64) -> pb::Entity,
) -> Duration {
    let started = Instant::now();
    let table = create.table.clone();
    let table = table.as_str();
    client
        .clone()
        .create_table(create)
        .await
        .expect("create table");
    let chunks: Vec<(u64, u64)> = (0..partitions)
        .flat_map(|p| (0..rows).step_by(100).map(move |r| (p, r)))
        .collect();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut loaders = Vec::new();
    for _ in 0..8 {
        let (client, chunks, next, table) = (
            client.clone(),
            chunks.clone(),
            next.clone(),
            table.to_owned(),
        );
        loaders.push(tokio::spawn(async move {
            let mut client = client;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(p, first)) = chunks.get(i) else {
                    return;
                };
                let ops = (first..(first + 100).min(rows))
                    .map(|r| insert_op(entity(p, r)))
                    .collect();
                let request = pb::SubmitTransactionRequest {
                    idempotency_key: String::new(),
                    table: table.clone(),
                    partition_key: partition_key(p),
                    operations: ops,
                };
                client
                    .submit_transaction(request)
                    .await
                    .expect("load transaction");
            }
        }));
    }
    for loader in loaders {
        loader.await.expect("loader");
    }
    started.elapsed()
}

/// Loads the scan table: one partition of `rows` entities.
pub(crate) async fn load_scan_table(client: &Client, rows: u64) {
    let mut client = client.clone();
    client
        .create_table(pb::CreateTableRequest {
            table: SCAN_TABLE.into(),
            ..Default::default()
        })
        .await
        .expect("create scan table");
    for first in (0..rows).step_by(100) {
        let ops = (first..(first + 100).min(rows))
            .map(|r| insert_op(small_entity(SCAN_PARTITION.into(), row_key(r), r as i32)))
            .collect();
        let request = pb::SubmitTransactionRequest {
            idempotency_key: String::new(),
            table: SCAN_TABLE.into(),
            partition_key: SCAN_PARTITION.into(),
            operations: ops,
        };
        client
            .submit_transaction(request)
            .await
            .expect("load scan table");
    }
}

pub(crate) async fn point_read(client: &Client, plan: &Plan) -> Measurement {
    let (client, plan2) = (client.clone(), plan.clone());
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let request = pb::GetEntityRequest {
            table: MAIN_TABLE.into(),
            partition_key: partition_key(rng.below(plan2.partitions)),
            row_key: row_key(rng.below(plan2.rows_per_partition)),
            select: vec![],
        };
        async move {
            client.get_entity(request).await.expect("get");
            OpResult::entities(1)
        }
    })
    .await
}

pub(crate) async fn insert(client: &Client, plan: &Plan) -> Measurement {
    let table = "InsertBench";
    create_table(client, table, false).await;
    let (warmup, duration) = (plan.warmup, plan.duration);
    insert_rows(client, table, "w", warmup, duration, |_| {}).await
}

/// `insert`'s work, each insert with an idempotency key of its own (as the SDK sends): what
/// recording the key in the same commit costs.
pub(crate) async fn insert_idempotent(client: &Client, plan: &Plan) -> Measurement {
    let table = "InsertKeyedBench";
    create_table(client, table, false).await;
    let (warmup, duration) = (plan.warmup, plan.duration);
    insert_keyed_rows(client, table, "k", 64, (warmup, duration), true, |_| {}).await
}

/// What a keyed insert writes, without a key: each call a `TransactWrite` of two inserts, an
/// entity as `insert`'s into one table and a small one into a partition of its own of another
/// (as a key's record is), 64 at once: calls/s, the fair comparison for `insert_idempotent`.
pub(crate) async fn insert_pair(client: &Client, plan: &Plan) -> Measurement {
    let (entities, records) = ("InsertPairBench", "InsertPairRecords");
    create_table(client, entities, false).await;
    create_table(client, records, false).await;
    let client = client.clone();
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let row_key = format!("{worker:02}-{seq:09}");
        let entity = small_entity(
            format!("p{:08}", rng.below(100_000_000)),
            row_key.clone(),
            seq as i32,
        );
        let record = small_entity(row_key, String::new(), 0);
        let operations = [(entities, entity), (records, record)]
            .into_iter()
            .map(|(table, entity)| pb::TableOperation {
                table: table.into(),
                partition_key: entity.partition_key.clone(),
                operation: Some(pb::TransactionOperation {
                    operation: Some(pb::transaction_operation::Operation::Insert(
                        pb::InsertOperation {
                            entity: Some(entity),
                        },
                    )),
                }),
            })
            .collect();
        async move {
            let request = pb::TransactWriteRequest {
                operations,
                idempotency_key: String::new(),
            };
            client.transact_write(request).await.expect("transact");
            OpResult::entities(1)
        }
    })
    .await
}

/// Creates `table`, keeping a change feed if `change_feed`.
pub(crate) async fn create_table(client: &Client, table: &str, change_feed: bool) {
    let create = pb::CreateTableRequest {
        table: table.into(),
        change_feed,
        ..Default::default()
    };
    client.clone().create_table(create).await.expect("create");
}

/// 64 workers inserting small entities at random partitions into `table` for `warmup` and then
/// `duration` (measured), their row keys beginning with `prefix` (distinct for each run into one
/// table); `acknowledged` is told each row key once its insert is answered.
pub(crate) async fn insert_rows(
    client: &Client,
    table: &str,
    prefix: &'static str,
    warmup: Duration,
    duration: Duration,
    acknowledged: impl Fn(String) + Send + Sync + Clone + 'static,
) -> Measurement {
    let times = (warmup, duration);
    insert_keyed_rows(client, table, prefix, 64, times, false, acknowledged).await
}

/// [`insert_rows`] by `clients` workers.
pub(crate) async fn insert_rows_by(
    client: &Client,
    table: &str,
    clients: usize,
    (warmup, duration): (Duration, Duration),
    acknowledged: impl Fn(String) + Send + Sync + Clone + 'static,
) -> Measurement {
    let times = (warmup, duration);
    insert_keyed_rows(client, table, "g", clients, times, false, acknowledged).await
}

/// [`insert_rows`], each insert with an idempotency key (its row key) if `keyed`.
async fn insert_keyed_rows(
    client: &Client,
    table: &str,
    prefix: &'static str,
    clients: usize,
    (warmup, duration): (Duration, Duration),
    keyed: bool,
    acknowledged: impl Fn(String) + Send + Sync + Clone + 'static,
) -> Measurement {
    let (client, table) = (client.clone(), table.to_owned());
    drive(clients, warmup, duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let row_key = format!("{prefix}{worker:02}-{seq:09}");
        let entity = small_entity(
            format!("p{:08}", rng.below(100_000_000)),
            row_key.clone(),
            seq as i32,
        );
        let (table, acknowledged) = (table.clone(), acknowledged.clone());
        let idempotency_key = if keyed {
            row_key.clone()
        } else {
            String::new()
        };
        async move {
            client
                .insert_entity(pb::InsertEntityRequest {
                    table,
                    entity: Some(entity),
                    idempotency_key,
                    ..Default::default()
                })
                .await
                .expect("insert");
            acknowledged(row_key);
            OpResult::entities(1)
        }
    })
    .await
}

/// Partition transactions of 100 inserts into a fresh partition, 8 at once: entities/s.
pub(crate) async fn tx_insert_100(client: &Client, plan: &Plan) -> Measurement {
    insert_transactions(client, plan, "TxBench", 100, 8).await
}

/// Partition transactions of 10 inserts into a fresh partition, 16 at once (as `tx_cross_10`):
/// the least a call of ten entities costs, beside `tx_cross_10`'s ten merges.
pub(crate) async fn tx_insert_10(client: &Client, plan: &Plan) -> Measurement {
    insert_transactions(client, plan, "TxBench10", 10, 16).await
}

/// Partition transactions of `rows` inserts each into a fresh partition of `table` (created
/// here), `concurrency` at once.
async fn insert_transactions(
    client: &Client,
    plan: &Plan,
    table: &str,
    rows: u64,
    concurrency: usize,
) -> Measurement {
    let mut c = client.clone();
    c.create_table(pb::CreateTableRequest {
        table: table.into(),
        ..Default::default()
    })
    .await
    .expect("create");
    let (client, table) = (client.clone(), table.to_owned());
    drive(
        concurrency,
        plan.warmup,
        plan.duration,
        move |worker, seq| {
            let mut client = client.clone();
            let pk = format!("w{worker:02}-{seq:09}");
            let ops = (0..rows)
                .map(|r| insert_op(small_entity(pk.clone(), row_key(r), r as i32)))
                .collect();
            let request = pb::SubmitTransactionRequest {
                idempotency_key: String::new(),
                table: table.clone(),
                partition_key: pk,
                operations: ops,
            };
            async move {
                client
                    .submit_transaction(request)
                    .await
                    .expect("transaction");
                OpResult::entities(rows)
            }
        },
    )
    .await
}

/// 10 conditional merges on a hot 100-row partition; `extra` counts conflicts.
pub(crate) async fn tx_hot_update(client: &Client, plan: &Plan) -> Measurement {
    let mut c = client.clone();
    c.create_table(pb::CreateTableRequest {
        table: "HotBench".into(),
        ..Default::default()
    })
    .await
    .expect("create");
    let ops = (0..100)
        .map(|r| insert_op(small_entity("hot".into(), row_key(r), 0)))
        .collect();
    c.submit_transaction(pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: "HotBench".into(),
        partition_key: "hot".into(),
        operations: ops,
    })
    .await
    .expect("seed hot partition");
    let client = client.clone();
    drive(16, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        async move {
            let scan = pb::QueryEntitiesRequest {
                table: "HotBench".into(),
                partition_key: Some("hot".into()),
                ..Default::default()
            };
            let rows = client
                .query_entities(scan)
                .await
                .expect("read hot partition")
                .into_inner()
                .entities;
            let mut picked: Vec<usize> = Vec::new();
            while picked.len() < 10 {
                let i = rng.below(rows.len() as u64) as usize;
                if !picked.contains(&i) {
                    picked.push(i);
                }
            }
            let ops = picked
                .into_iter()
                .map(|i| {
                    let row = &rows[i];
                    let entity = pb::Entity {
                        partition_key: "hot".into(),
                        row_key: row.row_key.clone(),
                        properties: [("V".to_owned(), int32(seq as i32))].into(),
                        ..Default::default()
                    };
                    pb::TransactionOperation {
                        operation: Some(pb::transaction_operation::Operation::Merge(
                            pb::MergeOperation {
                                entity: Some(entity),
                                if_match: row.etag.clone(),
                            },
                        )),
                    }
                })
                .collect();
            let request = pb::SubmitTransactionRequest {
                idempotency_key: String::new(),
                table: "HotBench".into(),
                partition_key: "hot".into(),
                operations: ops,
            };
            match client.submit_transaction(request).await {
                Ok(_) => OpResult::entities(10),
                Err(status) if status.code() == tonic::Code::FailedPrecondition => OpResult {
                    entities: 0,
                    extra: 1,
                },
                Err(status) => panic!("hot update: {status:?}"),
            }
        }
    })
    .await
}

pub(crate) async fn scan_paged(framed: &Framed, plan: &Plan) -> Measurement {
    let framed = framed.clone();
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let framed = framed.clone();
        async move {
            let mut request = scan_request();
            let mut entities = 0;
            loop {
                let page = framed.query(request.clone()).await;
                entities += page.entities.len() as u64;
                if page.continuation_token.is_empty() {
                    return OpResult { entities, extra: 0 };
                }
                request.continuation_token = page.continuation_token;
            }
        }
    })
    .await
}

pub(crate) async fn scan_stream(framed: &Framed, plan: &Plan) -> Measurement {
    let framed = framed.clone();
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let framed = framed.clone();
        async move {
            let mut stream = framed.scan(scan_request()).await;
            let mut entities = 0;
            while let Some(batch) = stream.message().await.expect("batch") {
                entities += batch.entities.len() as u64;
            }
            OpResult { entities, extra: 0 }
        }
    })
    .await
}

/// Passes over the whole main table, each read as `segments` segments streamed at once
/// (`ScanEntities` with `segment`/`total_segments`; one plain stream for 1), one pass at a time.
pub(crate) async fn table_scan_segments(
    framed: &Framed,
    plan: &Plan,
    segments: u32,
) -> Measurement {
    let framed = framed.clone();
    drive(1, plan.warmup, plan.duration, move |_, _| {
        let framed = framed.clone();
        async move {
            let streams: Vec<_> = (0..segments)
                .map(|segment| {
                    let framed = framed.clone();
                    tokio::spawn(async move {
                        let request = pb::QueryEntitiesRequest {
                            table: MAIN_TABLE.into(),
                            segment,
                            total_segments: if segments > 1 { segments } else { 0 },
                            ..Default::default()
                        };
                        let mut stream = framed.scan(request).await;
                        let mut entities = 0;
                        while let Some(batch) = stream.message().await.expect("batch") {
                            entities += batch.entities.len() as u64;
                        }
                        entities
                    })
                })
                .collect();
            let mut entities = 0;
            for stream in streams {
                entities += stream.await.expect("a segment's task");
            }
            OpResult { entities, extra: 0 }
        }
    })
    .await
}

/// The whole scan partition.
fn scan_request() -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: SCAN_TABLE.into(),
        partition_key: Some(SCAN_PARTITION.into()),
        ..Default::default()
    }
}

/// Follows a filtered query of `table` to its end: `entities` = returned, `extra` = examined.
pub(crate) async fn filtered_pass(client: &mut Client, table: &str, filter: &str) -> OpResult {
    let mut request = pb::QueryEntitiesRequest {
        table: table.into(),
        filter: filter.into(),
        ..Default::default()
    };
    let mut result = OpResult::default();
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .expect("filtered page")
            .into_inner();
        result.entities += page.entities.len() as u64;
        result.extra += page.stats.map_or(0, |s| s.entities_examined);
        if page.continuation_token.is_empty() {
            return result;
        }
        request.continuation_token = page.continuation_token;
    }
}

/// The top 100 of the whole main table by `L1` descending (not indexed), two queries at once as
/// `filter_scan` runs its scans: `entities` = returned, `extra` = examined.
pub(crate) async fn orderby_topk(client: &Client, plan: &Plan) -> Measurement {
    let client = client.clone();
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let mut client = client.clone();
        async move {
            let request = pb::QueryEntitiesRequest {
                table: MAIN_TABLE.into(),
                page_size: 100,
                order_by: vec![pb::OrderTerm {
                    path: "L1".into(),
                    descending: true,
                }],
                ..Default::default()
            };
            let page = client
                .query_entities(request)
                .await
                .expect("a sorted page")
                .into_inner();
            OpResult {
                entities: page.entities.len() as u64,
                extra: page.stats.map_or(0, |s| s.entities_examined),
            }
        }
    })
    .await
}

/// A full-table scan with a non-key predicate matching 0.1% of the entities.
pub(crate) async fn filter_scan(client: &Client, plan: &Plan) -> Measurement {
    let client = client.clone();
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let mut client = client.clone();
        async move { filtered_pass(&mut client, MAIN_TABLE, "V eq 7").await }
    })
    .await
}

/// `AggregateEntities` over the whole main table: the sum of `L1` for each value of `V` (1,000
/// groups, the most a call keeps), two at once as `filter_scan` runs its scans, each followed
/// through its continuation tokens to its answer. Counts the entities examined (as `extra`) and
/// the groups answered.
pub(crate) async fn aggregate_group(client: &Client, plan: &Plan) -> Measurement {
    let client = client.clone();
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let mut client = client.clone();
        async move {
            let mut request = pb::AggregateEntitiesRequest {
                query: Some(pb::QueryEntitiesRequest {
                    table: MAIN_TABLE.into(),
                    ..Default::default()
                }),
                aggregations: vec![pb::Aggregation {
                    function: pb::AggregateFunction::Sum as i32,
                    path: INT64_PROPERTIES[1].into(),
                }],
                group_by: vec!["V".into()],
            };
            let mut examined = 0;
            loop {
                let answer = client
                    .aggregate_entities(request.clone())
                    .await
                    .expect("aggregate")
                    .into_inner();
                examined += answer.stats.map_or(0, |s| s.entities_examined);
                if answer.continuation_token.is_empty() {
                    return OpResult {
                        entities: answer.groups.len() as u64,
                        extra: examined,
                    };
                }
                let query = request.query.as_mut().expect("set above");
                query.continuation_token = answer.continuation_token;
            }
        }
    })
    .await
}

/// A scan of 10 partitions' range with a non-key predicate matching 10% of them.
pub(crate) async fn partition_range_scan(client: &Client, plan: &Plan) -> Measurement {
    let client = client.clone();
    let filter = format!(
        "PartitionKey ge '{}' and PartitionKey lt '{}' and V lt 100",
        partition_key(10),
        partition_key(20)
    );
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let (mut client, filter) = (client.clone(), filter.clone());
        async move { filtered_pass(&mut client, MAIN_TABLE, &filter).await }
    })
    .await
}

/// 80% point reads, 20% durable upserts, on the main table.
pub(crate) async fn mixed(client: &Client, plan: &Plan) -> Measurement {
    let (client, plan2) = (client.clone(), plan.clone());
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let mut client = client.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let (pk, rk) = (
            partition_key(rng.below(plan2.partitions)),
            row_key(rng.below(plan2.rows_per_partition)),
        );
        let write = rng.below(5) == 0;
        async move {
            if write {
                let entity = small_entity(pk, rk, seq as i32);
                let request = pb::UpsertEntityRequest {
                    table: MAIN_TABLE.into(),
                    entity: Some(entity),
                    mode: pb::UpsertMode::Replace as i32,
                    ..Default::default()
                };
                client.upsert_entity(request).await.expect("upsert");
            } else {
                let request = pb::GetEntityRequest {
                    table: MAIN_TABLE.into(),
                    partition_key: pk,
                    row_key: rk,
                    select: vec![],
                };
                client.get_entity(request).await.expect("get");
            }
            OpResult::entities(1)
        }
    })
    .await
}

pub(crate) async fn echo_unary(echo: &EchoClient<Channel>, plan: &Plan) -> Measurement {
    let echo = echo.clone();
    drive(64, plan.warmup, plan.duration, move |_, _| {
        let mut echo = echo.clone();
        async move {
            echo.unary(EchoMessage {
                payload: vec![7; 64],
            })
            .await
            .expect("echo");
            OpResult::entities(1)
        }
    })
    .await
}

pub(crate) async fn echo_stream(echo: &EchoClient<Channel>, plan: &Plan) -> Measurement {
    let echo = echo.clone();
    drive(2, plan.warmup, plan.duration, move |_, _| {
        let mut echo = echo.clone();
        async move {
            let request = EchoStreamRequest {
                message: Some(EchoMessage {
                    payload: vec![7; 64],
                }),
                count: 100_000,
            };
            let mut stream = echo
                .stream(request)
                .await
                .expect("echo stream")
                .into_inner();
            let mut messages = 0;
            while stream.message().await.expect("echo message").is_some() {
                messages += 1;
            }
            OpResult::entities(messages)
        }
    })
    .await
}

/// The counter of `hot_counter`.
const COUNTER_TABLE: &str = "CounterBench";

fn counter_request(table: &str) -> pb::GetEntityRequest {
    pb::GetEntityRequest {
        table: table.into(),
        partition_key: "c".into(),
        row_key: "counter".into(),
        select: vec![],
    }
}

fn counter_value(entity: &pb::Entity) -> i64 {
    match entity.properties.get("N").and_then(|v| v.kind.clone()) {
        Some(pb::value::Kind::Int64Value(n)) => n,
        other => panic!("the counter holds {other:?}"),
    }
}

/// `hot_counter`: 64 clients increment one entity with `PatchEntity` (no condition, so no
/// conflicts). Returns the measurement and whether the final value equals every acknowledged
/// increment (warm-up included).
pub(crate) async fn hot_counter(client: &Client, plan: &Plan) -> (Measurement, bool) {
    let mut c = client.clone();
    c.create_table(pb::CreateTableRequest {
        table: COUNTER_TABLE.into(),
        ..Default::default()
    })
    .await
    .expect("create");
    let acknowledged = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let (counting, driving) = (acknowledged.clone(), client.clone());
    let measurement = drive(64, plan.warmup, plan.duration, move |_, _| {
        let (mut client, acknowledged) = (driving.clone(), counting.clone());
        async move {
            let by = pb::Value {
                kind: Some(pb::value::Kind::Int64Value(1)),
            };
            let increment = pb::PatchStep {
                step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
                    property: "N".into(),
                    by: Some(by),
                })),
            };
            client
                .patch_entity(pb::PatchEntityRequest {
                    table: COUNTER_TABLE.into(),
                    partition_key: "c".into(),
                    row_key: "counter".into(),
                    operations: vec![increment],
                    upsert: true,
                    return_no_content: true,
                    ..Default::default()
                })
                .await
                .expect("increment");
            acknowledged.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            OpResult::entities(1)
        }
    })
    .await;
    let stored = c
        .get_entity(counter_request(COUNTER_TABLE))
        .await
        .expect("read the counter")
        .into_inner();
    let counted = counter_value(&stored) == acknowledged.load(std::sync::atomic::Ordering::SeqCst);
    (measurement, counted)
}

/// The same counter kept the ETag way by 64 clients: read, then update on the ETag, again on a
/// conflict. `entities` counts the increments that succeeded (the goodput), `extra` the conflicts.
pub(crate) async fn hot_counter_read_modify_write(client: &Client, plan: &Plan) -> Measurement {
    let table = "CounterEtagBench";
    let mut c = client.clone();
    c.create_table(pb::CreateTableRequest {
        table: table.into(),
        ..Default::default()
    })
    .await
    .expect("create");
    let zero = pb::Entity {
        partition_key: "c".into(),
        row_key: "counter".into(),
        properties: [(
            "N".to_owned(),
            pb::Value {
                kind: Some(pb::value::Kind::Int64Value(0)),
            },
        )]
        .into(),
        ..Default::default()
    };
    c.insert_entity(pb::InsertEntityRequest {
        table: table.into(),
        entity: Some(zero),
        ..Default::default()
    })
    .await
    .expect("seed the counter");
    let client = client.clone();
    drive(64, plan.warmup, plan.duration, move |_, _| {
        let mut client = client.clone();
        async move {
            let current = client
                .get_entity(counter_request(table))
                .await
                .expect("read the counter")
                .into_inner();
            let mut next = current.clone();
            next.properties.insert(
                "N".into(),
                pb::Value {
                    kind: Some(pb::value::Kind::Int64Value(counter_value(&current) + 1)),
                },
            );
            let update = pb::UpdateEntityRequest {
                idempotency_key: String::new(),
                table: table.into(),
                entity: Some(next),
                if_match: current.etag,
                return_no_content: true,
            };
            match client.update_entity(update).await {
                Ok(_) => OpResult::entities(1),
                Err(status) if status.code() == tonic::Code::FailedPrecondition => OpResult {
                    entities: 0,
                    extra: 1,
                },
                Err(status) => panic!("update: {status:?}"),
            }
        }
    })
    .await
}
