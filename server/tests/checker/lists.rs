//! The list-append workload: keys spread over two tables and their partitions, each an entity
//! whose `L` is its list (elements as decimal text, space separated). A transaction reads its keys
//! with one `GetEntities` (one snapshot) and appends to some of them, conditioned on what it read:
//! each appended key replaced if its ETag is unchanged (inserted if it was absent), each other key
//! checked the same way, so that a write that commits read what it appends after. Transactions go
//! across partitions and tables (`TransactWrite`), within a partition (`SubmitTransaction`), or
//! to one key (`UpdateEntity`/`InsertEntity`); some only read. Some reads of one partition's keys
//! are a page of a query of the partition instead, segmented (`segment`/`total_segments`) and
//! sorted (`order_by` RowKey descending) at random, which must read one snapshot of the
//! partition, in the segment that holds it (and nothing in another), in its order. Half the
//! writes carry an idempotency key, and one left in doubt by a fault is sent again with it to any
//! server until its outcome is known: the retry must answer the first outcome and apply nothing
//! twice, or the history shows it.

use std::collections::BTreeMap;
use std::time::Instant;

use tonic::Code;
use trestle_proto::pb;
use trestle_server::model::Segment;

use super::elle::{Element, Key, Outcome, Transaction};
use super::rng::Rng;
use super::servers::Servers;

/// The list tables (both keep a change feed, checked by `feed.rs`).
pub(crate) const TABLES: [&str; 2] = ["ListA", "ListB"];
const PARTITIONS: usize = 3;
const ROWS: usize = 4;

/// Every key of the workload.
pub(crate) fn keys() -> Vec<(&'static str, String, String)> {
    let mut keys = Vec::new();
    for table in TABLES {
        for p in 0..PARTITIONS {
            for r in 0..ROWS {
                keys.push((table, format!("p{p}"), format!("r{r}")));
            }
        }
    }
    keys
}

fn key_name(table: &str, pk: &str, rk: &str) -> Key {
    format!("{table}/{pk}/{rk}")
}

/// A list as stored in `L`.
pub(crate) fn list_of(entity: &pb::Entity) -> Vec<Element> {
    match entity.properties.get("L").and_then(|v| v.kind.as_ref()) {
        Some(pb::value::Kind::StringValue(text)) => text
            .split_whitespace()
            .map(|e| e.parse().expect("an element"))
            .collect(),
        other => panic!("L is {other:?}"),
    }
}

fn entity_with(pk: &str, rk: &str, list: &[Element]) -> pb::Entity {
    let text: Vec<String> = list.iter().map(u64::to_string).collect();
    let value = pb::Value {
        kind: Some(pb::value::Kind::StringValue(text.join(" "))),
    };
    pb::Entity {
        partition_key: pk.into(),
        row_key: rk.into(),
        properties: [("L".to_owned(), value)].into(),
        ..Default::default()
    }
}

/// How a write's error leaves it: refused (nothing written) or in doubt.
pub(crate) fn outcome_of(status: &tonic::Status) -> Outcome {
    match status.code() {
        Code::FailedPrecondition | Code::AlreadyExists | Code::NotFound => Outcome::Failed,
        Code::InvalidArgument => panic!("the workload sent a bad request: {status:?}"),
        _ => Outcome::Unknown,
    }
}

/// A key read: its list and ETag (`None` if absent).
struct Read {
    table: &'static str,
    pk: String,
    rk: String,
    list: Vec<Element>,
    etag: Option<String>,
}

/// Runs one client of the workload until `stop`: its transactions. Elements are
/// `client * 10^9 + n`, unique in the history.
pub(crate) async fn run_client(
    client_no: u64,
    servers: Servers,
    stop: Instant,
    seed: u64,
) -> Vec<Transaction> {
    let mut rng = Rng::new(seed);
    let all = keys();
    let mut history = Vec::new();
    let mut next_element = client_no * 1_000_000_000;
    while Instant::now() < stop {
        let mut client = servers.pick(&mut rng);
        let kind = rng.below(10);
        let chosen: Vec<&(&str, String, String)> = match kind {
            // One partition of one table.
            6..=8 => {
                let table = TABLES[rng.below(TABLES.len())];
                let pk = format!("p{}", rng.below(PARTITIONS));
                let count = 2 + rng.below(2);
                let mut rows = pick(&mut rng, ROWS, count);
                rows.sort_unstable();
                rows.iter()
                    .map(|r| {
                        all.iter()
                            .find(|(t, p, rk)| *t == table && *p == pk && *rk == format!("r{r}"))
                            .expect("a key")
                    })
                    .collect()
            }
            9 => vec![&all[rng.below(all.len())]],
            _ => {
                let count = 2 + rng.below(3);
                pick(&mut rng, all.len(), count)
                    .into_iter()
                    .map(|at| &all[at])
                    .collect()
            }
        };
        let reads = match kind {
            6..=8 if rng.below(3) == 0 => {
                let sorted = rng.below(2) == 0;
                read_partition_page(&mut client, &chosen, sorted).await
            }
            _ => read(&mut client, &chosen).await,
        };
        let Some(reads) = reads else {
            continue;
        };
        history.push(Transaction::read(
            reads
                .iter()
                .map(|r| (key_name(r.table, &r.pk, &r.rk), r.list.clone()))
                .collect(),
        ));
        if kind < 3 {
            continue;
        }
        let appending = 1 + rng.below(reads.len().min(2));
        let appends: Vec<(Key, Element)> = reads[..appending]
            .iter()
            .map(|r| {
                next_element += 1;
                (key_name(r.table, &r.pk, &r.rk), next_element)
            })
            .collect();
        // Half the writes carry an idempotency key; one left in doubt (no answer: a server
        // killed) is sent again with it, to any server, until its outcome is known.
        let key = match rng.below(2) {
            0 => format!("client-{client_no}-{next_element}"),
            _ => String::new(),
        };
        let mut outcome = write(kind, &mut client, &reads, &appends, &key).await;
        let mut retries = 0;
        while outcome == Outcome::Unknown && !key.is_empty() && retries < RETRIES {
            tokio::time::sleep(RETRY_EVERY).await;
            let mut client = servers.pick(&mut rng);
            outcome = write(kind, &mut client, &reads, &appends, &key).await;
            retries += 1;
        }
        history.push(Transaction {
            outcome,
            reads: reads
                .iter()
                .map(|r| (key_name(r.table, &r.pk, &r.rk), r.list.clone()))
                .collect(),
            appends,
        });
    }
    history
}

/// How often, and how far apart, a keyed write left in doubt is sent again.
const RETRIES: usize = 60;
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// The write of transaction `kind` (across tables, in a partition, or of one key), with the
/// idempotency key `key` (empty: none).
async fn write(
    kind: usize,
    client: &mut super::servers::Client,
    reads: &[Read],
    appends: &[(Key, Element)],
    key: &str,
) -> Outcome {
    match kind {
        3..=5 => transact_write(client, reads, appends, key).await,
        6..=8 => submit_transaction(client, reads, appends, key).await,
        _ => write_one(client, &reads[0], appends[0].1, key).await,
    }
}

/// `count` distinct numbers below `n`.
fn pick(rng: &mut Rng, n: usize, count: usize) -> Vec<usize> {
    let mut picked = Vec::new();
    while picked.len() < count.min(n) {
        let at = rng.below(n);
        if !picked.contains(&at) {
            picked.push(at);
        }
    }
    picked
}

/// Reads `keys` at one instant; `None` if the read failed (a server down).
async fn read(
    client: &mut super::servers::Client,
    keys: &[&(&'static str, String, String)],
) -> Option<Vec<Read>> {
    let request = pb::GetEntitiesRequest {
        keys: keys
            .iter()
            .map(|(table, pk, rk)| pb::EntityRef {
                table: (*table).into(),
                partition_key: pk.clone(),
                row_key: rk.clone(),
            })
            .collect(),
        select: vec![],
    };
    let found = client.get_entities(request).await.ok()?.into_inner();
    Some(
        keys.iter()
            .zip(found.entities)
            .map(|((table, pk, rk), found)| Read {
                table,
                pk: pk.clone(),
                rk: rk.clone(),
                list: found.entity.as_ref().map(list_of).unwrap_or_default(),
                etag: found.entity.map(|e| e.etag),
            })
            .collect(),
    )
}

/// Segments the segmented reads split a table into.
const SEGMENTS: u32 = 3;

/// Reads `keys` (of one partition) as a page of a query of their partition in the segment that
/// holds it (`sorted`: by RowKey descending); checks the page's order, and that the segment after
/// it holds none of the partition's rows. `None` if a read failed (a server down).
async fn read_partition_page(
    client: &mut super::servers::Client,
    keys: &[&(&'static str, String, String)],
    sorted: bool,
) -> Option<Vec<Read>> {
    let (table, pk, _) = keys[0];
    let holder = Segment::index_of(pk, SEGMENTS);
    let order_by = match sorted {
        true => vec![pb::OrderTerm {
            path: "RowKey".into(),
            descending: true,
        }],
        false => vec![],
    };
    let query = |segment: u32| pb::QueryEntitiesRequest {
        table: (*table).into(),
        partition_key: Some(pk.clone()),
        segment,
        total_segments: SEGMENTS,
        order_by: order_by.clone(),
        ..Default::default()
    };
    let page = client
        .query_entities(query(holder))
        .await
        .ok()?
        .into_inner();
    assert!(page.continuation_token.is_empty(), "a page of 4 rows ends");
    let row_keys: Vec<&str> = page.entities.iter().map(|e| e.row_key.as_str()).collect();
    let mut ordered = row_keys.clone();
    ordered.sort_unstable();
    if sorted {
        ordered.reverse();
    }
    assert_eq!(row_keys, ordered, "{table}/{pk}'s page in its order");
    let elsewhere = query((holder + 1) % SEGMENTS);
    let other = client.query_entities(elsewhere).await.ok()?.into_inner();
    assert!(other.entities.is_empty(), "{table}/{pk} in two segments");
    let mut rows: BTreeMap<String, pb::Entity> = page
        .entities
        .into_iter()
        .map(|entity| (entity.row_key.clone(), entity))
        .collect();
    Some(
        keys.iter()
            .map(|(table, pk, rk)| {
                let found = rows.remove(rk);
                Read {
                    table,
                    pk: pk.clone(),
                    rk: rk.clone(),
                    list: found.as_ref().map(list_of).unwrap_or_default(),
                    etag: found.map(|e| e.etag),
                }
            })
            .collect(),
    )
}

/// The operation that appends `element` to `read`'s list if it is unchanged (or checks it is, with
/// no element).
fn operation(read: &Read, element: Option<Element>) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    let operation = match (element, &read.etag) {
        (Some(element), etag) => {
            let mut list = read.list.clone();
            list.push(element);
            let entity = Some(entity_with(&read.pk, &read.rk, &list));
            match etag {
                Some(etag) => Operation::Update(pb::UpdateOperation {
                    entity,
                    if_match: etag.clone(),
                }),
                None => Operation::Insert(pb::InsertOperation { entity }),
            }
        }
        (None, etag) => Operation::Check(pb::CheckOperation {
            row_key: read.rk.clone(),
            if_match: etag.clone().unwrap_or_default(),
            must_not_exist: etag.is_none(),
        }),
    };
    pb::TransactionOperation {
        operation: Some(operation),
    }
}

fn operations(reads: &[Read], appends: &[(Key, Element)]) -> Vec<pb::TransactionOperation> {
    reads
        .iter()
        .enumerate()
        .map(|(at, read)| operation(read, appends.get(at).map(|(_, e)| *e)))
        .collect()
}

async fn transact_write(
    client: &mut super::servers::Client,
    reads: &[Read],
    appends: &[(Key, Element)],
    key: &str,
) -> Outcome {
    let request = pb::TransactWriteRequest {
        idempotency_key: key.into(),
        operations: reads
            .iter()
            .zip(operations(reads, appends))
            .map(|(read, operation)| pb::TableOperation {
                table: read.table.into(),
                partition_key: read.pk.clone(),
                operation: Some(operation),
            })
            .collect(),
    };
    match client.transact_write(request).await {
        Ok(_) => Outcome::Committed,
        Err(status) => outcome_of(&status),
    }
}

async fn submit_transaction(
    client: &mut super::servers::Client,
    reads: &[Read],
    appends: &[(Key, Element)],
    key: &str,
) -> Outcome {
    let request = pb::SubmitTransactionRequest {
        idempotency_key: key.into(),
        table: reads[0].table.into(),
        partition_key: reads[0].pk.clone(),
        operations: operations(reads, appends),
    };
    match client.submit_transaction(request).await {
        Ok(_) => Outcome::Committed,
        Err(status) => outcome_of(&status),
    }
}

async fn write_one(
    client: &mut super::servers::Client,
    read: &Read,
    element: Element,
    key: &str,
) -> Outcome {
    let mut list = read.list.clone();
    list.push(element);
    let entity = Some(entity_with(&read.pk, &read.rk, &list));
    let written = match &read.etag {
        Some(etag) => client
            .update_entity(pb::UpdateEntityRequest {
                idempotency_key: key.into(),
                table: read.table.into(),
                entity,
                if_match: etag.clone(),
                return_no_content: true,
            })
            .await
            .map(drop),
        None => client
            .insert_entity(pb::InsertEntityRequest {
                idempotency_key: key.into(),
                table: read.table.into(),
                entity,
                return_no_content: true,
            })
            .await
            .map(drop),
    };
    match written {
        Ok(()) => Outcome::Committed,
        Err(status) => outcome_of(&status),
    }
}

/// Every key's list as stored now (absent keys as empty lists), read until the servers answer.
pub(crate) async fn final_lists(servers: &Servers) -> BTreeMap<Key, Vec<Element>> {
    let keys = keys();
    let chosen: Vec<_> = keys.iter().collect();
    let mut rng = Rng::new(7);
    for _ in 0..100 {
        let mut client = servers.pick(&mut rng);
        if let Some(reads) = read(&mut client, &chosen).await {
            return reads
                .into_iter()
                .map(|r| (key_name(r.table, &r.pk, &r.rk), r.list))
                .collect();
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("no server answered the final read");
}

/// Checks the queries that read the lists as a whole against `finals` (the lists as stored now,
/// read by `GetEntities`): per table, `AggregateEntities`' count (through its continuation
/// tokens); the union of `SEGMENTS`
/// segments read page by page (each key once); and a query sorted by RowKey descending, paged
/// and streamed.
pub(crate) async fn check_whole_table_reads(
    servers: &Servers,
    finals: &BTreeMap<Key, Vec<Element>>,
) {
    let mut client = servers.each().remove(0);
    for table in TABLES {
        let mut present: Vec<(String, String)> = keys()
            .into_iter()
            .filter(|(t, pk, rk)| *t == table && !finals[&key_name(t, pk, rk)].is_empty())
            .map(|(_, pk, rk)| (pk, rk))
            .collect();
        let query = pb::QueryEntitiesRequest {
            table: table.into(),
            page_size: 2,
            ..Default::default()
        };
        let mut aggregate = pb::AggregateEntitiesRequest {
            query: Some(query.clone()),
            aggregations: vec![pb::Aggregation {
                function: pb::AggregateFunction::Count as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        // The servers examine 7 entities a call: the count is carried by continuation tokens.
        let counted = loop {
            let answer = client.aggregate_entities(aggregate.clone()).await.unwrap();
            let answer = answer.into_inner();
            if answer.continuation_token.is_empty() {
                break answer;
            }
            aggregate.query.as_mut().unwrap().continuation_token = answer.continuation_token;
        };
        let count: u64 = counted.groups.iter().map(|group| group.entities).sum();
        assert_eq!(
            count,
            present.len() as u64,
            "{table}: the aggregate's count"
        );

        let mut segmented = Vec::new();
        for segment in 0..SEGMENTS {
            let request = pb::QueryEntitiesRequest {
                segment,
                total_segments: SEGMENTS,
                ..query.clone()
            };
            segmented.extend(read_pages(&mut client, request).await);
        }
        segmented.sort();
        assert_eq!(
            segmented, present,
            "{table}: the segments together, each key once"
        );

        let sorted = pb::QueryEntitiesRequest {
            order_by: vec![pb::OrderTerm {
                path: "RowKey".into(),
                descending: true,
            }],
            ..query
        };
        present.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let read = read_pages(&mut client, sorted.clone()).await;
        assert_eq!(read, present, "{table}: sorted by RowKey descending, paged");
        // Streamed: a sorted pass per batch of two (the page size).
        let mut stream = client.scan_entities(sorted).await.unwrap().into_inner();
        let mut streamed = Vec::new();
        while let Some(batch) = stream.message().await.unwrap() {
            let batch = batch.entities.into_iter();
            streamed.extend(batch.map(|e| (e.partition_key, e.row_key)));
        }
        assert_eq!(
            streamed, present,
            "{table}: sorted by RowKey descending, streamed"
        );
    }
}

/// The keys of every page of `request`, in order.
async fn read_pages(
    client: &mut super::servers::Client,
    mut request: pb::QueryEntitiesRequest,
) -> Vec<(String, String)> {
    let mut keys = Vec::new();
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        keys.extend(
            page.entities
                .into_iter()
                .map(|e| (e.partition_key, e.row_key)),
        );
        if page.continuation_token.is_empty() {
            return keys;
        }
        request.continuation_token = page.continuation_token;
    }
}
